"""Why is a job where it is? One plain sentence per job, from the job, its pool and its surroundings.

"retry 3 of 5 at 10:42:07 after TimeoutError", "waiting for a crawl worker: 37 ahead of it", "lease
held by host-a:4312, last heartbeat 3 s ago", "pool crawl is paused", "waiting for review since
09:10:00". Every figure comes from the database (database time), never from what a worker said.
"""

from __future__ import annotations

import math
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from dashboard import options as console_options
from dashboard.display import moment, rate
from jobs import flows
from jobs.display import ago, clock
from jobs.models import LEASED_STATES, FlowKey, FlowLane, FlowRest, Job, ReviewLease, State, Transition
from jobs.services import flow_key_named
from workers.runtime import options as runtime_options
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.registry import UnknownJobType, registry
from workers.runtime.selectors import live_workers

AHEAD_CAP = 10_000
RIVALS_SHOWN = 50  # the other keys of its lane counted into "ahead of it", the least served first


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
    key = FlowKey.objects.filter(pool=job.pool, key=job.flow_key).first()
    if key and key.paused:
        return (
            f"{_key_named(job)} is paused (by {key.changed_by or 'someone'} at {clock(key.changed_at)}: "
            f"{key.reason or 'no reason given'}); none of its jobs is claimed until it is resumed"
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
    # The pool's default limit per key holds no job without a key (one line, not a key).
    limit = key.max_running if key and key.max_running else registry.flow_limit(job.pool) if job.flow_key else None
    if limit is not None:
        running = Job.objects.filter(pool=job.pool, flow_key=job.flow_key, state__in=LEASED_STATES).count()
        if running >= limit:
            return (
                f"{_key_named(job)} is at its limit ({running:,} of {limit:,} running); "
                "its next job starts when one of them ends"
            )
    until = flows.rate_limited_until(key, now)
    if until is not None:
        return (
            f"{_key_named(job)} is rate-limited until {moment(until, now)} "
            f"(at most {rate(key.rate_starts, key.rate_seconds)}); then it takes its share again"
        )
    resting = FlowRest.objects.filter(pool=job.pool, key=job.flow_key, until__gt=now).values_list("until", flat=True)
    if until := resting.first():
        return (
            f"{_key_named(job)} is resting until {moment(until, now)} (politeness: the host may not be asked "
            "before then, as its last answer decided); then it takes its share again"
        )
    return _in_line(job, now, weight=key.weight if key else 1)


def _in_line(job: Job, now: datetime, *, weight: int) -> str:
    """How many start before it: the more urgent lanes' due jobs, its key's own before it, and the
    other keys' places in its lane's fair share before its own place (docs/architecture.md)."""
    due = Job.objects.filter(pool=job.pool, state=State.PLANNED, due_at__lte=now)
    urgent = due.filter(priority__lt=job.priority).values("id")[:AHEAD_CAP].count()
    own = (
        due.filter(priority=job.priority, flow_key=job.flow_key)
        .filter(Q(due_at__lt=job.due_at) | Q(due_at=job.due_at, id__lt=job.id))
        .values("id")[:AHEAD_CAP]
        .count()
    )
    lane = FlowLane.objects.filter(pool=job.pool, priority=job.priority, key=job.flow_key).first()
    others, keys = 0, 0
    if lane is not None:
        place = lane.vtime + own / weight
        rivals = (
            FlowLane.objects.filter(pool=job.pool, priority=job.priority, next_due__lte=now, vtime__lte=place)
            .exclude(key=job.flow_key)
            .order_by("vtime")[:RIVALS_SHOWN]
        )
        weights = dict(
            FlowKey.objects.filter(pool=job.pool, key__in=[r.key for r in rivals]).values_list("key", "weight")
        )
        for rival in rivals:
            places = min(math.floor((place - rival.vtime) * weights.get(rival.key, 1)) + 1, AHEAD_CAP - others)
            waiting = due.filter(priority=job.priority, flow_key=rival.key).values("id")[:places].count()
            others += waiting
            keys += 1 if waiting else 0
            if others >= AHEAD_CAP:
                break
    ahead = urgent + own + others
    shown = f"{AHEAD_CAP:,}+" if ahead >= AHEAD_CAP else f"{ahead:,}"
    detail = ""
    if others:  # shared with other keys: say how the count is made up
        parts = [f"{urgent:,} in more urgent lanes"] if urgent else []
        parts.append(f"{own:,} of {_key_named(job)}'s own first")
        parts.append(f"its fair share: {others:,} jobs of {keys:,} other {_key_kind(job)}s start first")
        detail = f"; {', '.join(parts)}"
    return f"waiting for a {job.pool} worker: {shown} ahead of it (priority {job.priority}){detail}"


def _key_kind(job: Job) -> str:
    try:
        declared = registry.get(job.type).flow_key
    except UnknownJobType:
        declared = ""
    return {"source": "source", "client": "client", "host": "host"}.get(declared, "key")


def _key_named(job: Job) -> str:
    """ "source shop-a", "client client:php", "the system's own jobs" (no key)."""
    if not job.flow_key:
        return f"its pool's unkeyed {_key_kind(job)}" if _key_kind(job) != "key" else "its pool's shared line"
    return f"{_key_kind(job)} {flow_key_named(job.flow_key)}"


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


def _held(job: Job, now: datetime) -> str:
    held = Transition.objects.filter(job=job, to_state=State.HELD).order_by("-id").first()
    by, at = (held.actor, clock(held.at)) if held else ("someone", "an unknown time")
    reason = held.cause.removeprefix("held: ") if held else "no reason recorded"
    return f"held by {by} at {at}: {reason}; no worker claims it until it is resumed"


_EXPLAIN = {
    State.PLANNED: _planned,
    State.HELD: _held,
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
