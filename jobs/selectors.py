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


def subject_prefix(prefix: str) -> Q:
    """Jobs whose subject starts with ``prefix``, in the form the partial subject index serves: the
    planner uses a partial index only when the query repeats its condition (``subject <> ''``)."""
    return Q(subject__startswith=prefix) & ~Q(subject="")
