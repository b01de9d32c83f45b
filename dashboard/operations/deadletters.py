"""The dead-letter queue pivoted: dead jobs grouped by type, error class and the step they died in.

Each group counts its jobs that went dead within 1 h, 3 h, 24 h, 3 d and 7 d and in all, says when
the error was first and last seen, which processing versions produced it, and shows the newest
job's message. The step is the last step of the job's final attempt, read from the path signature
the control process records (``robots > fetch! -> failed``: ``fetch``); an attempt not judged yet
has none ("—"). The jobs list and the bulk actions filter by it too (``?step=fetch``). A group is
marked **new with V** when V, the type's current processing version, is the only version that
produced this error while the type's other dead letters show older versions: the error came with
the new handler.

One grouped query over the dead jobs (``job_dead_idx``), each with an index probe of its final
attempt by the unique ``(job, lease_version)``. It costs about 0.25 s at 40,000 dead jobs, so the
page over every dead job reads a snapshot the control process refreshes (``dead_letters_refresh``,
every ``LEITSTAND_CONSOLE_DEADLETTERS_SECONDS``); a batch's dead letters are grouped live.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.db.models.lookups import Regex

from alerts.alert_rules import Firing, Rule, option
from dashboard.models import ConsoleSnapshot, DeadLetterReview
from jobs import reads
from jobs.audit import audit_record
from jobs.models import OPERATE_PERMISSION, Attempt, Job, LeitstandNow, database_now
from jobs.services import JobInputError
from workers.runtime.registry import registry

WINDOWS = (
    ("1 h", timedelta(hours=1)),
    ("3 h", timedelta(hours=3)),
    ("24 h", timedelta(hours=24)),
    ("3 d", timedelta(days=3)),
    ("7 d", timedelta(days=7)),
)  # five: the statement dead_letter_groups (jobs/reads.sql) counts these windows

STEP = re.compile(r"[a-z][a-z0-9_]*")


def ended_in_step(step: str) -> Regex:
    """Jobs whose latest attempt's checked path ends in ``step`` (the jobs list's and bulk actions'
    ``step`` filter, matching the groups' step column). A scalar subquery, so PostgreSQL probes the
    final attempt of each job the other filters leave (a semi-join would scan every attempt)."""
    if not STEP.fullmatch(step):
        raise ValueError(f"{step!r} is not a step name")
    final_signature = Subquery(
        Attempt.objects.filter(job=OuterRef("pk"), lease_version=OuterRef("lease_version")).values("path_signature")[:1]
    )
    return Regex(final_signature, rf"(^| > ){step}[!~]? -> ")


@dataclass
class Group:
    type: str
    error_class: str
    step: str
    counts: list[int]  # per window of WINDOWS
    total: int
    first_seen: datetime | None  # None only for dead jobs without a finishing time (not written by the engine)
    last_seen: datetime | None
    newest_job_id: str
    versions: set[str] = field(default_factory=set)
    newest_message: str = ""
    new_with: str = ""

    def as_data(self) -> dict:
        return {
            **{
                name: getattr(self, name)
                for name in (
                    "type",
                    "error_class",
                    "step",
                    "counts",
                    "total",
                    "newest_job_id",
                    "new_with",
                    "newest_message",
                )
            },
            **{
                name: moment.isoformat() if (moment := getattr(self, name)) else None
                for name in ("first_seen", "last_seen")
            },
            "versions": sorted(self.versions),
        }

    @classmethod
    def from_data(cls, data: dict) -> Group:
        return cls(
            **{
                **data,
                "versions": set(data["versions"]),
                **{
                    name: datetime.fromisoformat(data[name]) if data[name] else None
                    for name in ("first_seen", "last_seen")
                },
            }
        )

    @property
    def version_list(self) -> list[str]:
        return sorted(version or "—" for version in self.versions)

    @property
    def error_name(self) -> str:
        return self.error_class.rsplit(".", 1)[-1] or "(no error class)"


def dead_letter_groups(*, batch_id: int | None = None, now: datetime | None = None) -> list[Group]:
    """The dead jobs' groups, the most recent trouble first (dead within 1 h, then 24 h, then all)."""
    now = now or database_now()
    since = {f"since_{n}": now - span for n, (_, span) in enumerate(WINDOWS)}
    rows = reads.rows("dead_letter_groups", batch=batch_id, **since)
    groups: dict[tuple[str, str, str], Group] = {}
    type_versions: dict[str, set[str]] = {}
    for job_type, error_class, step, version, *rest in rows:
        counts, (total, first, last, job_id) = list(rest[: len(WINDOWS)]), rest[len(WINDOWS) :]
        type_versions.setdefault(job_type, set()).add(version)
        group = groups.get((job_type, error_class, step))
        if group is None:
            groups[job_type, error_class, step] = Group(
                job_type, error_class, step, counts, total, first, last, job_id, {version}
            )
            continue
        group.counts = [a + b for a, b in zip(group.counts, counts)]
        group.total += total
        group.versions.add(version)
        if last and (group.last_seen is None or last > group.last_seen):
            group.newest_job_id = job_id
        group.first_seen = min(filter(None, (group.first_seen, first)), default=None)
        group.last_seen = max(filter(None, (group.last_seen, last)), default=None)
    messages = dict(
        Job.objects.filter(pk__in=[g.newest_job_id for g in groups.values()]).values_list("pk", "error_message")
    )
    for group in groups.values():
        group.newest_message = messages.get(uuid.UUID(group.newest_job_id), "")[:300]
    current = {t.name: t.processing_version for t in registry.all()}
    for group in groups.values():
        version = current.get(group.type)
        if version and group.versions == {version} and type_versions[group.type] - {version}:
            group.new_with = version
    return sorted(groups.values(), key=lambda g: (-g.counts[0], -g.counts[2], -g.total, g.type, g.error_class))


SNAPSHOT = "deadletters"


def dead_letters_refresh() -> dict[str, int]:
    """Group every dead job now and store the groups for the console (the control process, throttled);
    a reviewed group with dead jobs newer than its review is reopened. How many groups, how many reopened."""
    now, started = database_now(), time.perf_counter()
    groups = dead_letter_groups(now=now)
    reviews = {(r.type, r.error_class, r.step): r for r in DeadLetterReview.objects.filter(reopened_at__isnull=True)}
    reopened = 0
    for group in groups:
        review = reviews.get((group.type, group.error_class, group.step))
        if review and group.last_seen and group.last_seen > review.reviewed_at:
            reopened += DeadLetterReview.objects.filter(pk=review.pk, reopened_at__isnull=True).update(reopened_at=now)
    ConsoleSnapshot.objects.update_or_create(
        name=SNAPSHOT,
        defaults={
            "data": {"now": now.isoformat(), "groups": [group.as_data() for group in groups]},
            "refreshed_at": LeitstandNow(),
            "took_ms": (time.perf_counter() - started) * 1000,
        },
    )
    return {"groups": len(groups), "reopened": reopened}


def reviews_attach(groups: list[Group]) -> list[Group]:
    """Each group's review (``group.review``) and state: *unreviewed*, *reopened* (new dead jobs
    after the review) or *reviewed*; the groups waiting for a person first, in their order."""
    reviews = {(r.type, r.error_class, r.step): r for r in DeadLetterReview.objects.all()}
    for group in groups:
        group.review = reviews.get((group.type, group.error_class, group.step))
        if group.review is None:
            group.review_state = "unreviewed"
        elif group.review.reopened_at or (group.last_seen and group.last_seen > group.review.reviewed_at):
            group.review_state = "reopened"
        else:
            group.review_state = "reviewed"
    return sorted(groups, key=lambda g: g.review_state == "reviewed")


def groups_to_review() -> list[tuple[Group, datetime | None]]:
    """The groups waiting for a review, each with the moment it began to wait: its first dead job, or
    when new dead jobs reopened it (the dead-letter sweep notices within its interval)."""
    groups, _, _ = dead_letters_snapshot()
    waiting = []
    for group in reviews_attach(groups):
        if group.review_state == "unreviewed":
            waiting.append((group, group.first_seen))
        elif group.review_state == "reopened":
            waiting.append((group, group.review.reopened_at or group.last_seen))
    return waiting


def dead_letter_review(
    *, type: str, error_class: str, step: str, decision: str, note: str, actor: str, user
) -> DeadLetterReview:
    """A person reviews a group: the decision (retry after a fix, cancel, keep watching) and a note;
    audited. Reviewing again replaces the review (and closes a reopened group)."""
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} may not review dead letters")
    if decision not in DeadLetterReview.Decision.values:
        raise JobInputError("decision", f"must be one of: {', '.join(DeadLetterReview.Decision.values)}")
    if not note or not note.strip():
        raise JobInputError("note", "is required: say what you found and why you decided so")
    if step and (len(step) > 64 or not STEP.fullmatch(step)):
        raise JobInputError("step", f"{step[:64]!r} is not a step name")
    if len(type) > 64 or len(error_class) > 255:
        raise JobInputError("group", "names no dead-letter group (type or error class too long)")
    groups, now, _ = dead_letters_snapshot()
    if not any((g.type, g.error_class, g.step) == (type, error_class, step) for g in groups):
        raise JobInputError(
            "group",
            f"no dead-letter group {type} · {error_class or '(no error class)'} · {step or '—'} "
            f"(as grouped at {now:%H:%M:%S}: the page's groups)",
        )
    review, _ = DeadLetterReview.objects.update_or_create(
        type=type,
        error_class=error_class,
        step=step,
        defaults={
            "decision": decision,
            "note": note.strip()[:1000],
            "reviewed_by": actor[:255],
            "reviewed_at": database_now(),
            "reopened_at": None,
        },
    )
    audit_record(
        actor=actor,
        action="deadletters.reviewed",
        target=f"dead letters {type} {error_class or '(no error class)'} in {step or '—'}",
        reason=note,
        result=review.get_decision_display(),
    )
    return review


def dead_letters_snapshot() -> tuple[list[Group], datetime, ConsoleSnapshot]:
    """The stored groups, the moment they were counted at, and the snapshot (computed now if none yet)."""
    snapshot = ConsoleSnapshot.objects.filter(name=SNAPSHOT).first()
    if snapshot is None:
        dead_letters_refresh()
        snapshot = ConsoleSnapshot.objects.get(name=SNAPSHOT)
    groups = [Group.from_data(data) for data in snapshot.data["groups"]]
    return groups, datetime.fromisoformat(snapshot.data["now"]), snapshot


# The console's alert rule over the reviews (registered by ``dashboard.operations.registrations``).
def _unreviewed(now: datetime, memory: dict) -> list[Firing]:
    """Dead-letter groups nobody reviewed (or reopened by new dead jobs) for longer than ``age_seconds``, per type."""
    per_type: dict[str, list] = {}
    for group, since in groups_to_review():
        if since is not None and (now - since).total_seconds() >= option(
            "dlq_unreviewed", "age_seconds", f"type:{group.type}"
        ):
            per_type.setdefault(group.type, []).append((group, since))
    firings = []
    for job_type, groups in per_type.items():
        oldest_group, oldest = min(groups, key=lambda pair: pair[1])
        firings.append(
            Firing(
                f"type:{job_type}",
                len(groups),
                0,
                f"{job_type}: {len(groups)} dead-letter groups ({sum(g.total for g, _ in groups):,} dead jobs) wait for a "
                f"review; the oldest, {oldest_group.error_name} in step {oldest_group.step or '—'}, since "
                f"{oldest:%Y-%m-%d %H:%M}",
            )
        )
    return firings


UNREVIEWED_RULE = Rule("dlq_unreviewed", "Dead-letter groups wait for a person's review", _unreviewed)
