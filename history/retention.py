"""Retention: what leaves PostgreSQL, when, and only after it was archived.

A job leaves with its whole **tree** (the job without a parent and every descendant: a crawl's
analysis jobs, their recheck jobs), because children keep their parent and a recheck plan keeps the
recheck jobs its observations name. A tree may leave when every member may:

- it ended (done, cancelled, dead) longer ago than its retention: ``LEITSTAND_RETENTION["days"]`` per
  state, overridden per type by ``["types"]``;
- its batch, if any, is finished;
- a member with a finding is kept ``finding_days`` (the business evidence), one with a recheck plan
  until the plan ended ``plan_days`` ago (an active plan keeps it);
- open review cases are not ended, so they are kept anyway.

The audit log is archived a day at a time once older than ``audit_days`` and then purged
(``audit_retire``).

The sweep (``retention_sweep``, run by the control process) chooses trees, records their jobs as
archived in pending files, writes and verifies the files (``history.archive``), then
purges every job of the round in one call of ``leitstand_jobs_purge`` as the maintenance role (the
application role may not). A crash at any point is resumed by the next sweep: pending files are
written again, written files purged; a job is in exactly one file. While a file cannot be written,
nothing is purged (alert ``archive_failing``).

The other records have their own retention: expired sessions, login logs, django-q2's task results,
resolved alerts with their events, resolved rule violations and finished batches without members.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import transaction
from django.db.models import Exists, OuterRef

from alerts.models import Alert, RuleViolation
from history import archive, options
from history.models import ArchivedJob, ArchiveFile
from history.options import RetentionOptions
from jobs import reads
from jobs.leadership import fenced
from jobs.models import TERMINAL_STATES, AuditEntry, Batch, BatchCounter, Job, database_now

logger = logging.getLogger("leitstand.retention")

_EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)


@dataclass
class Member:
    root: uuid.UUID
    id: uuid.UUID
    type: str
    state: str
    finished_at: datetime | None
    correlation_id: str
    batch_open: bool
    has_plan: bool
    plan_ended_at: datetime | None
    has_finding: bool
    root_finished_at: datetime


@dataclass
class RetentionReport:
    trees_seen: int = 0
    trees_kept: int = 0
    archived: int = 0
    purged: int = 0
    files: int = 0
    audit_purged: int = 0
    partitions_created: int = 0
    partitions_dropped: int = 0
    trimmed: dict = field(default_factory=dict)
    stopped: str = ""


class _Cursor:
    """Where the last round stopped among the roots, so kept trees never starve the ones after them."""

    after: tuple[datetime, uuid.UUID] = (_EPOCH, uuid.UUID(int=0))


def _policy() -> RetentionOptions:
    return options.current()


def member_may_leave(member: Member, now: datetime) -> bool:
    policy = _policy()
    if member.state not in TERMINAL_STATES or member.finished_at is None or member.batch_open:
        return False
    days = policy.days_for(member.type, member.state)
    if member.has_finding:
        days = max(days, policy.finding_days)
    if member.has_plan:
        if member.plan_ended_at is None or member.plan_ended_at > now - timedelta(days=policy.plan_days):
            return False
    return member.finished_at <= now - timedelta(days=days)


def trees_leaving(now: datetime, *, limit: int) -> tuple[list[list[Member]], int]:
    """The next ``limit`` trees after the cursor whose every member may leave, and how many trees were
    looked at; the cursor moves on (and starts again at the oldest once it reached the end)."""
    # Every member of the chosen trees with what its rules need (one statement per round).
    members = [
        Member(*row)
        for row in reads.rows(
            "retention_trees",
            horizon=now - timedelta(days=_policy().shortest_days()),
            after_at=_Cursor.after[0],
            after_id=_Cursor.after[1],
            limit=limit,
        )
    ]
    trees = defaultdict(list)
    for member in members:
        trees[member.root].append(member)
    if len(trees) < limit:
        _Cursor.after = (_EPOCH, uuid.UUID(int=0))
    elif members:
        last = max(members, key=lambda m: (m.root_finished_at, m.root))
        _Cursor.after = (last.root_finished_at, last.root)
    leaving = [tree for tree in trees.values() if all(member_may_leave(m, now) for m in tree)]
    return leaving, len(trees)


def _files_create(trees: list[list[Member]]) -> list[ArchiveFile]:
    """Pending files for every job of ``trees``, by the day (UTC) it ended and its type; each job is
    recorded in its file, so no other round takes it."""
    groups = defaultdict(list)
    for tree in trees:
        for member in tree:
            groups[(member.finished_at.date(), member.type)].append(member)
    per_file = _policy().jobs_per_file
    files = []
    with fenced("retention.archive"):
        for (day, job_type), members in sorted(groups.items()):
            for start in range(0, len(members), per_file):
                chunk = members[start : start + per_file]
                file = ArchiveFile.objects.create(
                    path=archive.file_path(day, job_type), day=day, job_type=job_type, jobs=len(chunk)
                )
                ArchivedJob.objects.bulk_create(
                    ArchivedJob(
                        job_id=m.id,
                        file=file,
                        line=line,
                        type=m.type,
                        state=m.state,
                        correlation_id=m.correlation_id,
                        finished_at=m.finished_at,
                    )
                    for line, m in enumerate(chunk)
                )
                files.append(file)
    return files


def _purge_written() -> int:
    """Purge every job of the written files (one call, so a tree split over files leaves whole), as
    the maintenance role; jobs that came back to life meanwhile stay and lose their archive entry."""
    files = list(ArchiveFile.objects.filter(state=ArchiveFile.State.WRITTEN).exclude(job_type=archive.AUDIT))
    if not files:
        return 0
    ids = list(ArchivedJob.objects.filter(file__in=files).values_list("job_id", flat=True))
    purged = archive.jobs_purge(ids)
    with fenced("retention.purge"):
        alive = set(Job.objects.filter(pk__in=ids).values_list("pk", flat=True))
        if alive:
            logger.warning("%d archived jobs changed before their purge; they stay and are archived again", len(alive))
            ArchivedJob.objects.filter(job_id__in=alive).delete()
        for file in files:  # what stays recorded in a file is what left the database
            ArchiveFile.objects.filter(pk=file.pk).update(
                state=ArchiveFile.State.PURGED, purged=file.members.count(), purged_at=database_now()
            )
    return purged


def _file_write(file: ArchiveFile) -> bool:
    """Written only by the current leader (checked first); the write itself is not in the fence's
    transaction, so that a failure is recorded on the file (it updates it after a database error)."""
    with fenced("retention.archive"):
        pass
    return archive.file_write(file)


def jobs_retire(report: RetentionReport, now: datetime, deadline: float) -> None:
    """Resume what a crash left, then archive and purge the trees that may leave."""
    unfinished = [ArchiveFile.State.PENDING, ArchiveFile.State.FAILED]
    for file in ArchiveFile.objects.filter(state__in=unfinished).exclude(job_type=archive.AUDIT):
        if not _file_write(file):
            report.stopped = f"archive file {file.path} could not be written: {file.error}"
            return  # nothing is purged while a file of its round is missing
    report.purged += _purge_written()
    while time.monotonic() < deadline:
        trees, seen = trees_leaving(now, limit=_policy().trees_per_round)
        report.trees_seen += seen
        report.trees_kept += seen - len(trees)
        if trees:
            files = _files_create(trees)
            for file in files:
                if not _file_write(file):
                    report.stopped = f"archive file {file.path} could not be written: {file.error}"
                    return
                report.files += 1
                report.archived += file.jobs
            report.purged += _purge_written()
        if _Cursor.after[0] == _EPOCH:  # went through every tree once
            return


def audit_retire(report: RetentionReport, now: datetime, deadline: float) -> None:
    """The audit log, a day at a time, oldest first: archived to ``audit/<day>.jsonl.gz``, verified,
    then purged through ``leitstand_log_purge`` as the maintenance role. A day written but not purged
    (a crash) is purged first; a day not written is never purged."""
    days = _policy().audit_days
    if not days:
        return
    unfinished = ArchiveFile.objects.filter(job_type=archive.AUDIT).exclude(state=ArchiveFile.State.PURGED)
    for file in unfinished.order_by("day"):
        if file.state != ArchiveFile.State.WRITTEN:
            file = _audit_day_archive(file.day)
        if not _audit_purge(file, report):
            return
    cutoff = (now - timedelta(days=days)).date()
    while time.monotonic() < deadline:
        oldest = AuditEntry.objects.order_by("at").values_list("at", flat=True).first()
        if oldest is None or oldest.astimezone(dt_timezone.utc).date() >= cutoff:
            return
        if not _audit_purge(_audit_day_archive(oldest.astimezone(dt_timezone.utc).date()), report):
            return


def _audit_day_archive(day) -> ArchiveFile:
    with fenced("retention.audit"):  # as _file_write
        pass
    return archive.audit_day_archive(day)


def _audit_purge(file: ArchiveFile, report: RetentionReport) -> bool:
    if file.state != ArchiveFile.State.WRITTEN:
        report.stopped = f"archive file {file.path} could not be written: {file.error}"
        return False
    end = datetime.combine(file.day + timedelta(days=1), datetime.min.time(), tzinfo=dt_timezone.utc)
    purged = archive.maintenance_call("SELECT leitstand_log_purge(%s::regclass, %s)", [AuditEntry._meta.db_table, end])
    with fenced("retention.audit"):
        ArchiveFile.objects.filter(pk=file.pk).update(
            state=ArchiveFile.State.PURGED, purged=file.jobs, purged_at=database_now()
        )
    report.audit_purged += purged
    return True


def partitions_keep(report: RetentionReport, now: datetime) -> None:
    """Daily partitions of the history: created ahead, and dropped whole once old (as the maintenance
    role). A partition with history of a job that was neither kept nor archived is never dropped."""
    policy = _policy()
    report.partitions_created = archive.maintenance_call(
        "SELECT leitstand_partitions_ensure(%s)", [policy.partition_days_ahead]
    )
    before = (now - timedelta(days=policy.partition_keep_days)).astimezone(dt_timezone.utc).date()
    report.partitions_dropped = archive.maintenance_call("SELECT leitstand_partitions_drop(%s)", [before])


def records_trim(now: datetime) -> dict:
    """The other records' retention; returns the rows deleted per kind."""
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django.contrib.sessions.models import Session
    from django_q.models import Task

    policy = _policy()

    def before(days: float) -> datetime:
        return now - timedelta(days=days)

    trimmed = {"sessions": Session.objects.filter(expire_date__lt=now).delete()[0]}
    logins = before(policy.login_log_days)
    trimmed["login_logs"] = sum(
        model.objects.filter(attempt_time__lt=logins).delete()[0]
        for model in (AccessLog, AccessFailureLog, AccessAttempt)
    )
    trimmed["task_results"] = Task.objects.filter(stopped__lt=before(policy.task_days)).delete()[0]
    old_alerts = Alert.objects.filter(state=Alert.State.RESOLVED, resolved_at__lt=before(policy.alert_days))
    trimmed["alerts"] = old_alerts.delete()[1].get("alerts.Alert", 0)  # with their events
    trimmed["rule_violations"] = RuleViolation.objects.filter(
        resolved_at__isnull=False, resolved_at__lt=before(policy.alert_days)
    ).delete()[0]
    empty = Batch.objects.filter(finished_at__lt=before(policy.batch_days)).exclude(
        Exists(Job.objects.filter(batch=OuterRef("pk")))
    )
    with transaction.atomic():
        BatchCounter.objects.filter(batch__in=empty).delete()
        trimmed["batches"] = empty.delete()[0]
    trimmed["archive_index"] = archive_index_trim(now)
    return trimmed


ARCHIVE_INDEX_FILES_PER_ROUND = 100


def archive_index_trim(now: datetime) -> int:
    """The archive index forgets the jobs of purged files older than ``archive_index_days``, a hundred
    files (≤ 100,000 entries) a round; the files stay, and ``archived_document`` reads them."""
    days = _policy().archive_index_days
    if not days:
        return 0
    old = ArchiveFile.objects.filter(
        state=ArchiveFile.State.PURGED, indexed=True, day__lt=(now - timedelta(days=days)).date()
    ).exclude(job_type=archive.AUDIT)
    files = list(old.order_by("day").values_list("pk", flat=True)[:ARCHIVE_INDEX_FILES_PER_ROUND])
    with transaction.atomic():
        forgotten = ArchivedJob.objects.filter(file__in=files).delete()[0]
        ArchiveFile.objects.filter(pk__in=files).update(indexed=False)
    return forgotten


def retention_sweep(*, seconds_per_round: float) -> RetentionReport:
    """One round: jobs, then the audit log, then partitions, until ``seconds_per_round`` have passed
    (what is left waits for the next round); then the other records are trimmed."""
    report = RetentionReport()
    now = database_now()
    deadline = time.monotonic() + seconds_per_round
    jobs_retire(report, now, deadline)
    if not report.stopped:
        audit_retire(report, now, deadline)
    if not report.stopped:
        partitions_keep(report, now)
    with fenced("retention.trim"):
        report.trimmed = records_trim(now)
    if report.archived or report.purged or report.stopped:
        logger.info("retention: %s", report)
    return report
