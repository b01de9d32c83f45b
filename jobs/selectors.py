"""Read-only queries over jobs, for commands, the console and the API."""

from __future__ import annotations

from django.db.models import Count, Max, Min, QuerySet

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
