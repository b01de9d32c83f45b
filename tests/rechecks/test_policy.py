"""The recheck policy as pure functions: widening, capping, early checks, jitter bounds, every end."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rechecks.policy import EndReason, Kind, Progress, RecheckPolicy, Target, classify, decide, duration, first_check

H = 3600
POLICY = RecheckPolicy(
    first_delay_seconds=H,
    min_interval_seconds=6 * H,
    max_interval_seconds=48 * H,
    widen_factor=2,
    early_seconds=H,
    jitter=0,
    confirmations_required=2,
    deadline_seconds=14 * 86400,
)
NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(days=14)
RNG = random.Random(7)


SIX_HOURS = Progress(6 * H)


def run(kind, progress=SIX_HOURS, *, target=Target.GONE_OR_CHANGED, now=NOW, policy=POLICY):
    return decide(policy, target, progress, kind, now=now, deadline_at=DEADLINE, rng=RNG)


def test_unchanged_observations_widen_the_interval_up_to_its_maximum():
    progress, reasons, delays = Progress(6 * H), [], []
    for _ in range(5):
        decision = run(Kind.UNCHANGED, progress)
        progress = decision.progress
        reasons.append(decision.reason)
        delays.append((decision.next_check_at - NOW).total_seconds() / H)
    assert delays == [12, 24, 48, 48, 48]
    assert reasons[:3] == [
        "unchanged 1×: interval widened 6 h → 12 h",
        "unchanged 2×: interval widened 12 h → 1 d",
        "unchanged 3×: interval widened 1 d → 2 d",
    ]
    assert reasons[3] == "unchanged 4×: interval stays at 2 d"
    assert progress.unchanged_count == 5


@pytest.mark.parametrize(
    "kind", [Kind.REDIRECTED, Kind.SERVER_ERROR, Kind.CHANGED_MATCH, Kind.UNREACHABLE, Kind.CLIENT_ERROR]
)
def test_a_relevant_change_brings_the_next_check_forward_and_resets_the_interval(kind):
    decision = run(kind, Progress(48 * H, unchanged_count=4, confirmations=1))
    assert decision.next_check_at == NOW + timedelta(hours=1)
    assert decision.progress == Progress(6 * H)
    assert "a relevant change, checking earlier, in 1 h (interval back to 6 h)" in decision.reason


def test_gone_is_confirmed_early_and_ends_the_plan_after_the_required_confirmations():
    first = run(Kind.GONE, Progress(24 * H, unchanged_count=3))
    assert first.end is None and first.next_check_at == NOW + timedelta(hours=1)
    assert first.reason == "gone (1 of 2 confirmations): confirming in 1 h"
    second = run(Kind.GONE, first.progress)
    assert second.end == EndReason.TARGET_CONFIRMED and second.next_check_at is None
    assert second.reason == "gone 2× in a row: target confirmed"


def test_no_longer_matching_confirms_only_the_gone_or_changed_target():
    assert run(Kind.NO_LONGER_MATCHING, Progress(6 * H, confirmations=1)).end == EndReason.TARGET_CONFIRMED
    relevant = run(Kind.NO_LONGER_MATCHING, Progress(6 * H, confirmations=1), target=Target.GONE)
    assert relevant.end is None and relevant.progress.confirmations == 0


def test_a_confirmation_streak_is_broken_by_anything_else():
    back_online = run(Kind.UNCHANGED, Progress(6 * H, confirmations=1))
    assert back_online.progress.confirmations == 0
    assert run(Kind.GONE, back_online.progress).end is None


def test_the_deadline_ends_the_plan_for_review_and_no_check_is_planned_after_it():
    late = run(Kind.UNCHANGED, Progress(48 * H), now=DEADLINE - timedelta(hours=3))
    assert late.next_check_at == DEADLINE and late.reason.endswith("; last check at the deadline")
    ended = run(Kind.UNCHANGED, late.progress, now=DEADLINE)
    assert ended.end == EndReason.DEADLINE_PASSED and ended.next_check_at is None
    assert ended.reason == (
        "deadline passed: still not confirmed 14 d after the match (last seen: unchanged); a person decides"
    )
    assert run(Kind.GONE, Progress(6 * H, confirmations=1), now=DEADLINE).end == EndReason.TARGET_CONFIRMED


@given(jitter=st.floats(0, 0.9), delay=st.floats(1, 10 * 86400), seed=st.integers(0, 2**32))
def test_jitter_stays_in_its_bounds(jitter, delay, seed):
    policy = RecheckPolicy(
        first_delay_seconds=delay,
        min_interval_seconds=delay,
        max_interval_seconds=delay,
        widen_factor=1,
        early_seconds=delay,
        jitter=jitter,
        confirmations_required=1,
        deadline_seconds=100 * 86400,
    )
    far = NOW + timedelta(days=100)
    next_at, _ = first_check(policy, now=NOW, deadline_at=far, rng=random.Random(seed))
    waited = (next_at - NOW).total_seconds()
    assert max(delay * (1 - jitter), 1.0) - 1e-6 <= waited <= delay * (1 + jitter) + 1e-6
    decision = decide(
        policy, Target.GONE, Progress(delay), Kind.UNCHANGED, now=NOW, deadline_at=far, rng=random.Random(seed)
    )
    assert decision.next_check_at <= far


@pytest.mark.parametrize(
    "status,score,hash_,redirected,kind",
    [
        (None, None, "", False, Kind.UNREACHABLE),
        (404, None, "", False, Kind.GONE),
        (410, None, "", False, Kind.GONE),
        (503, None, "", False, Kind.SERVER_ERROR),
        (429, None, "", False, Kind.SERVER_ERROR),
        (403, None, "", False, Kind.CLIENT_ERROR),
        (200, None, "h2", False, Kind.NO_LONGER_MATCHING),
        (200, 0.5, "h2", False, Kind.NO_LONGER_MATCHING),
        (200, 0.97, "h1", True, Kind.REDIRECTED),
        (200, 0.97, "h1", False, Kind.UNCHANGED),
        (200, 0.95, "h2", False, Kind.CHANGED_MATCH),
    ],
)
def test_classify(status, score, hash_, redirected, kind):
    assert (
        classify(status=status, score=score, content_hash=hash_, last_hash="h1", redirected=redirected, match_at=0.9)
        == kind
    )


def test_an_invalid_policy_is_refused_with_every_problem_named():
    with pytest.raises(ValueError, match="max_interval_seconds must not be below.*widen_factor.*jitter"):
        RecheckPolicy(
            first_delay_seconds=1,
            min_interval_seconds=10,
            max_interval_seconds=5,
            widen_factor=0.5,
            early_seconds=1,
            jitter=1.5,
            confirmations_required=1,
            deadline_seconds=10,
        )


def test_durations_read_like_a_person_would_write_them():
    assert [duration(s) for s in (45, 90, 1800, 6 * H, 5400, 14 * 86400)] == [
        "45 s",
        "1.5 min",
        "30 min",
        "6 h",
        "1.5 h",
        "14 d",
    ]
