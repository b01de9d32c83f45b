"""Why is a job where it is? One plain sentence per job, from the job, its pool and its surroundings.

"retry 3 of 5 at 10:42:07 after TimeoutError", "waiting for a crawl worker: 37 ahead of it", "lease
held by host-a:4312, last heartbeat 3 s ago", "pool crawl is paused", "waiting for review since
09:10:00". Every figure comes from the database (database time), never from what a worker said.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from dashboard import options as console_options
from dashboard.display import ago, clock
from jobs.models import Job, ReviewLease, State, Transition
from workers.runtime import options as runtime_options
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.registry import UnknownJobType, registry
from workers.runtime.selectors import live_workers

AHEAD_CAP = 10_000


def job_explain(job: Job, *, now: datetime) -> str:
    explain = _EXPLAIN.get(job.state)
    return explain(job, now) if explain else f"{job.state}"


def _planned(job: Job, now: datetime) -> str:
    if job.due_at > now:
        last = Transition.objects.filter(job=job).order_by("-id").values_list("cause", flat=True).first() or ""
        why = f" ({last})" if last.startswith("released: deferred") else ""
        return f"not due yet: due at {clock(job.due_at)}, in {ago((job.due_at - now).total_seconds())}{why}"
    pool = Pool.objects.filter(name=job.pool).first()
    if pool and pool.is_paused:
        return (
            f"pool {job.pool} is paused (by {pool.changed_by or 'someone'} at {clock(pool.changed_at)}: "
            f"{pool.reason or 'no reason given'}); nothing is claimed until it is resumed"
        )
    if not live_workers().filter(pool=job.pool).exists():
        last = WorkerProcess.objects.filter(pool=job.pool).order_by("-last_seen_at").first()
        seen = (
            (
                f"; last worker {last.host}:{last.pid} seen at {clock(last.last_seen_at)}"
                + (f" ({last.stop_reason})" if last.stop_reason else "")
            )
            if last
            else "; no worker has ever run it"
        )
        return f"no live worker in pool {job.pool}{seen}"
    ahead = (
        Job.objects.filter(pool=job.pool, state=State.PLANNED, due_at__lte=now)
        .filter(
            Q(priority__lt=job.priority)
            | Q(priority=job.priority, due_at__lt=job.due_at)
            | Q(priority=job.priority, due_at=job.due_at, id__lt=job.id)
        )
        .values("id")[:AHEAD_CAP]
    )
    count = ahead.count()
    shown = f"{AHEAD_CAP:,}+" if count >= AHEAD_CAP else f"{count:,}"
    return f"waiting for a {job.pool} worker: {shown} ahead of it (priority {job.priority})"


def _leased(job: Job, now: datetime) -> str:
    holder = job.lease_owner or "a worker"
    if job.lease_expires_at and job.lease_expires_at < now:
        grace = runtime_options.current().lease_grace_seconds
        return (
            f"lease of {holder} expired {ago((now - job.lease_expires_at).total_seconds())} ago; the reaper "
            f"releases it {grace} s after expiry (attempt {job.attempts} of {job.max_attempts})"
        )
    beat = (
        f"last heartbeat {ago((now - job.heartbeat_at).total_seconds())} ago"
        if job.heartbeat_at
        else "no heartbeat yet"
    )
    verb = "reserved by" if job.state == State.RESERVED else "lease held by"
    expires = f", lease until {clock(job.lease_expires_at)}" if job.lease_expires_at else ""
    return f"{verb} {holder}, {beat}{expires} (attempt {job.attempts} of {job.max_attempts})"


def _failed(job: Job, now: datetime) -> str:
    error = job.error_class.rsplit(".", 1)[-1] or "an error"
    when = f"at {clock(job.next_attempt_at)}" if job.next_attempt_at else "when the retry sweep runs"
    return f"retry {job.attempts + 1} of {job.max_attempts} {when} after {error}"


def _unclear(job: Job, now: datetime) -> str:
    return f"business-unclear since {clock(job.state_changed_at)}: the review sweep opens a review case ({job.error_message[:200]})"


def _review(job: Job, now: datetime) -> str:
    sentence = (
        f"waiting for review since {clock(job.state_changed_at)} ({ago((now - job.state_changed_at).total_seconds())})"
    )
    lease = ReviewLease.objects.filter(job=job, expires_at__gt=now).first()
    if lease:
        sentence += f", opened by {lease.reviewer} until {clock(lease.expires_at)}"
    return sentence


def _recheck(job: Job, now: datetime) -> str:
    plan = getattr(job, "recheck_plan", None)
    if plan is None:
        return "executed; waiting for its recheck plan"
    if plan.state == plan.State.ENDED:
        return f"recheck plan {plan.pk} ended ({plan.end_reason}): the case follows at the planner's next sweep"
    if plan.next_check_at is None:
        return f"recheck plan {plan.pk}: check {plan.sequence} is under way"
    return (
        f"recheck plan {plan.pk}: next check at {clock(plan.next_check_at)} — {plan.next_check_reason}; "
        f"deadline {timezone.localtime(plan.deadline_at):%Y-%m-%d %H:%M}"
    )


def _stored(job: Job, now: datetime) -> str:
    return f"result stored at {clock(job.state_changed_at)}: waiting for an operator to confirm the business outcome"


def _ended(job: Job, now: datetime) -> str:
    when = clock(job.finished_at or job.state_changed_at)
    if job.state == State.DEAD:
        return (
            f"in the dead-letter queue since {when} after {job.error_class or 'an error'}: "
            f"{job.error_message[:200]}; an operator may retry it"
        )
    return f"{job.state} at {when}: {job.completion_reason or 'no reason recorded'}"


_EXPLAIN = {
    State.PLANNED: _planned,
    State.RESERVED: _leased,
    State.RUNNING: _leased,
    State.FAILED: _failed,
    State.UNCLEAR: _unclear,
    State.READY_FOR_REVIEW: _review,
    State.RECHECK_DUE: _recheck,
    State.RESULT_STORED: _stored,
    State.DONE: _ended,
    State.DEAD: _ended,
    State.CANCELLED: _ended,
}


def heartbeat_limit_seconds(job_type: str) -> float:
    """A running job's heartbeat older than this is stuck (k × its type's heartbeat interval)."""
    try:
        interval = registry.get(job_type).heartbeat_seconds
    except UnknownJobType:
        interval = 10.0
    return interval * console_options.current().stuck_heartbeat_intervals
