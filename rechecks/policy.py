"""The recheck interval policy: pure functions of the plan's progress, the observation and the time.

A recheck plan follows a reported copy until it ends. After each observation the policy decides:

- the observation **confirms the target** (the copy is gone: 404/410; or, for the target
  ``gone_or_changed``, the content no longer matches the asset): one more confirmation; after
  ``confirmations_required`` in a row the plan ends *target confirmed*, before that the next check
  comes early (``early_seconds``) to confirm;
- **unchanged** (online, same content, still matching): the interval widens by ``widen_factor`` up
  to ``max_interval_seconds`` ("unchanged 3×: interval widened 6 h → 12 h");
- a **relevant intermediate status** (a redirect, a 5xx or 429, another 4xx, unreachable, content
  changed but still matching): the next check comes early, and the interval starts again from
  ``min_interval_seconds``;
- a plan whose deadline has come without confirmation ends *deadline passed* (a person decides);
  no check is ever planned after the deadline (the last one is at the deadline).

Every delay gets a random jitter of ±``jitter`` (a fraction), so plans created together spread out.
Nothing here reads a clock or the database: the caller passes ``now`` and a random source.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta


class Target(enum.StrEnum):
    GONE = "gone"  # 404 or 410
    GONE_OR_CHANGED = "gone_or_changed"  # … or the content no longer matches the protected asset


class Kind(enum.StrEnum):
    """What one observation saw."""

    GONE = "gone"
    NO_LONGER_MATCHING = "no_longer_matching"
    UNCHANGED = "unchanged"
    CHANGED_MATCH = "changed_match"
    REDIRECTED = "redirected"
    SERVER_ERROR = "server_error"
    CLIENT_ERROR = "client_error"
    UNREACHABLE = "unreachable"


LABELS = {
    Kind.GONE: "gone",
    Kind.NO_LONGER_MATCHING: "no longer matching",
    Kind.UNCHANGED: "unchanged",
    Kind.CHANGED_MATCH: "content changed, still matching",
    Kind.REDIRECTED: "redirected",
    Kind.SERVER_ERROR: "server error",
    Kind.CLIENT_ERROR: "refused by the site",
    Kind.UNREACHABLE: "unreachable",
}


class EndReason(enum.StrEnum):
    TARGET_CONFIRMED = "target_confirmed"
    MANUAL_DECISION = "manual_decision"
    DEADLINE_PASSED = "deadline_passed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class RecheckPolicy:
    first_delay_seconds: float
    min_interval_seconds: float
    max_interval_seconds: float
    widen_factor: float
    early_seconds: float
    jitter: float
    confirmations_required: int
    deadline_seconds: float

    def __post_init__(self) -> None:
        problems = []
        for name in ("first_delay_seconds", "min_interval_seconds", "early_seconds", "deadline_seconds"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive")
        if self.max_interval_seconds < self.min_interval_seconds:
            problems.append("max_interval_seconds must not be below min_interval_seconds")
        if self.widen_factor < 1:
            problems.append("widen_factor must be at least 1")
        if not 0 <= self.jitter < 1:
            problems.append("jitter must be a fraction from 0 to below 1")
        if self.confirmations_required < 1:
            problems.append("confirmations_required must be at least 1")
        if problems:
            raise ValueError("invalid recheck policy: " + "; ".join(problems))


@dataclass(frozen=True)
class Progress:
    """The counters a plan carries from one observation to the next."""

    interval_seconds: float
    unchanged_count: int = 0
    confirmations: int = 0


@dataclass(frozen=True)
class Decision:
    progress: Progress
    reason: str
    next_check_at: datetime | None = None  # None when the plan ends
    end: EndReason | None = None


def duration(seconds: float) -> str:
    """'45 s', '30 min', '6 h', '1.5 h', '14 d' — for reasons a person reads."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{round(seconds / size, 1):g} {unit}"
    return f"{round(seconds, 1):g} s"


def classify(
    *, status: int | None, score: float | None, content_hash: str, last_hash: str, redirected: bool, match_at: float
) -> Kind:
    """What an observation saw: ``status`` None means no answer (timeout, refused, robots.txt)."""
    if status is None:
        return Kind.UNREACHABLE
    if status in (404, 410):
        return Kind.GONE
    if status >= 500 or status == 429:
        return Kind.SERVER_ERROR
    if not 200 <= status < 300:
        return Kind.CLIENT_ERROR
    if score is None or score < match_at:  # replaced by another image, or by something that is no image
        return Kind.NO_LONGER_MATCHING
    if redirected:
        return Kind.REDIRECTED
    return Kind.UNCHANGED if content_hash == last_hash else Kind.CHANGED_MATCH


def confirms(target: Target, kind: Kind) -> bool:
    return kind == Kind.GONE or (target == Target.GONE_OR_CHANGED and kind == Kind.NO_LONGER_MATCHING)


def jittered(seconds: float, jitter: float, rng: random.Random) -> float:
    return seconds * (1 + rng.uniform(-jitter, jitter))


def first_check(
    policy: RecheckPolicy, *, now: datetime, deadline_at: datetime, rng: random.Random
) -> tuple[datetime, str]:
    delay = jittered(policy.first_delay_seconds, policy.jitter, rng)
    return _bounded(now, delay, deadline_at, f"first check {duration(policy.first_delay_seconds)} after the match")


def decide(
    policy: RecheckPolicy,
    target: Target,
    progress: Progress,
    kind: Kind,
    *,
    now: datetime,
    deadline_at: datetime,
    rng: random.Random,
) -> Decision:
    label = LABELS[kind]
    if confirms(target, kind):
        count = progress.confirmations + 1
        confirmed = replace(progress, confirmations=count, unchanged_count=0)
        if count >= policy.confirmations_required:
            return Decision(confirmed, f"{label} {count}× in a row: target confirmed", end=EndReason.TARGET_CONFIRMED)
        if now >= deadline_at:
            return _deadline(policy, confirmed, label)
        next_at, reason = _bounded(
            now,
            jittered(policy.early_seconds, policy.jitter, rng),
            deadline_at,
            f"{label} ({count} of {policy.confirmations_required} confirmations): "
            f"confirming in {duration(policy.early_seconds)}",
        )
        return Decision(confirmed, reason, next_at)
    if now >= deadline_at:
        return _deadline(policy, replace(progress, confirmations=0), label)
    if kind == Kind.UNCHANGED:
        count = progress.unchanged_count + 1
        widened = min(progress.interval_seconds * policy.widen_factor, policy.max_interval_seconds)
        if widened > progress.interval_seconds:
            why = f"unchanged {count}×: interval widened {duration(progress.interval_seconds)} → {duration(widened)}"
        else:
            why = f"unchanged {count}×: interval stays at {duration(widened)}"
        next_at, reason = _bounded(now, jittered(widened, policy.jitter, rng), deadline_at, why)
        return Decision(Progress(interval_seconds=widened, unchanged_count=count), reason, next_at)
    next_at, reason = _bounded(
        now,
        jittered(policy.early_seconds, policy.jitter, rng),
        deadline_at,
        f"{label}: a relevant change, checking earlier, in {duration(policy.early_seconds)} "
        f"(interval back to {duration(policy.min_interval_seconds)})",
    )
    return Decision(Progress(interval_seconds=policy.min_interval_seconds), reason, next_at)


def _deadline(policy: RecheckPolicy, progress: Progress, label: str) -> Decision:
    return Decision(
        progress,
        f"deadline passed: still not confirmed {duration(policy.deadline_seconds)} after the "
        f"match (last seen: {label}); a person decides",
        end=EndReason.DEADLINE_PASSED,
    )


def _bounded(now: datetime, delay: float, deadline_at: datetime, reason: str) -> tuple[datetime, str]:
    """No check after the deadline: the last one is at the deadline."""
    next_at = now + timedelta(seconds=max(delay, 1.0))
    if next_at >= deadline_at:
        return deadline_at, f"{reason}; last check at the deadline"
    return next_at, reason
