"""Read-only queries over jobs, for commands, the console and the API."""

from __future__ import annotations

import uuid

from django.db.models import Count, Max, Min, Q, QuerySet

from jobs.models import Job, State


def dead_letter_jobs(*, job_type: str | None = None, error_class: str | None = None) -> QuerySet[Job]:
    """Jobs in the dead-letter queue, newest first; filters match exactly."""
    jobs = Job.objects.filter(state=State.DEAD)
    if job_type:
        jobs = jobs.filter(type=job_type)
    if error_class:
        jobs = jobs.filter(error_class=error_class)
    return jobs.order_by("-finished_at", "id")


def dead_letter_groups(*, job_type: str | None = None, error_class: str | None = None) -> QuerySet:
    """The dead-letter queue grouped by (type, error class), with counts and first/last seen."""
    return (
        dead_letter_jobs(job_type=job_type, error_class=error_class)
        .order_by()
        .values("type", "error_class")
        .annotate(count=Count("id"), first_seen=Min("finished_at"), last_seen=Max("finished_at"))
        .order_by("-count", "type", "error_class")
    )


def id_prefix_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The IDs that start with ``term`` (at least 6 hex digits, dashes ignored) as a closed range of
    the primary key, which PostgreSQL orders as the hex digits read; None when it is not such a
    prefix."""
    digits = term.strip().lower().replace("-", "")
    if not 6 <= len(digits) <= 32 or any(c not in "0123456789abcdef" for c in digits):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def short_id(job_id) -> str:
    """How lists show a job's ID: its first 8 hex digits (its creation time to about a minute, where it
    stands among the others) and, after '…', its last 6 (random: what tells apart the jobs created in
    that minute — 1,000 of them share a tail with a chance of 3 %; UUIDv7's first digits alone are the
    same for all of them). ``short_id_query`` finds
    it again. What is no job ID is shown as given, cut to 13 characters (a form's malformed input)."""
    try:
        digits = uuid.UUID(str(job_id)).hex
    except ValueError:
        return str(job_id)[:13]
    return f"{digits[:8]}…{digits[-6:]}"


def short_id_query(term: str, *, field: str = "id") -> Q | None:
    """The jobs a short ID (``01a24deb…a13f9c``, or with ``...``) or an ID prefix of at least 6 hex
    digits names, as a condition on ``field``: the head's range of the primary key, then the tail
    among those (a range scan over a minute's jobs); None when ``term`` is neither."""
    head, separator, tail = term.strip().lower().replace("...", "…").partition("…")
    bounds = id_prefix_range(head)
    if bounds is None:
        return None
    query = Q(**{f"{field}__gte": bounds[0], f"{field}__lte": bounds[1]})
    if not separator:
        return query
    if not 1 <= len(tail) <= 12 or any(c not in "0123456789abcdef" for c in tail):
        return None
    return query & Q(**{f"{field}__endswith": tail})


def subject_prefix(prefix: str) -> Q:
    """Jobs whose subject starts with ``prefix``, in the form the partial subject index serves: the
    planner uses a partial index only when the query repeats its condition (``subject <> ''``)."""
    return Q(subject__startswith=prefix) & ~Q(subject="")


def jobs_page(
    jobs: QuerySet[Job],
    *,
    correlation_id: str | None = None,
    job_type: str | None = None,
    subject: str | None = None,
    state: str | None = None,
    updated_after=None,
    after: tuple | None = None,
    limit: int = 50,
) -> tuple[list[Job], bool]:
    """A page of ``jobs`` (the caller's visible set) in the order of their last state change, oldest
    first, keyset-paginated after ``after`` = (state_changed_at, id) of the previous page's last job:
    a page never skips or repeats a job while others change. Returns the page and whether more follow."""
    if correlation_id:
        jobs = jobs.filter(correlation_id=correlation_id)
    if job_type:
        jobs = jobs.filter(type=job_type)
    if subject:
        jobs = jobs.filter(subject_prefix(subject))
    if state:
        jobs = jobs.filter(state=state)
    if updated_after:
        jobs = jobs.filter(state_changed_at__gt=updated_after)
    if after:
        moment, last_id = after
        # (state_changed_at, id) > (moment, last_id), with the range on its own so job_changed_idx serves it.
        jobs = jobs.filter(Q(state_changed_at__gt=moment) | Q(id__gt=last_id), state_changed_at__gte=moment)
    page = list(jobs.order_by("state_changed_at", "id")[: limit + 1])
    return page[:limit], len(page) > limit
