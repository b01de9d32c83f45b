"""Stuck leases: which leased jobs count as stuck (the console's page lists them, the snapshot counts
them for the home and the navigation)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q, QuerySet

from dashboard import options as console_options
from jobs.models import Job, State
from workers.runtime.registry import registry


def stuck_jobs(now) -> QuerySet:
    """Leased jobs whose lease expired, or whose heartbeat is older than k of their type's intervals
    (the leased set's partial index)."""
    k = console_options.current().stuck_heartbeat_intervals
    silent = Q()
    for declared in registry.all():
        silent |= Q(type=declared.name, heartbeat_at__lt=now - timedelta(seconds=declared.heartbeat_seconds * k))
    silent |= ~Q(type__in=[t.name for t in registry.all()]) & Q(heartbeat_at__lt=now - timedelta(seconds=10 * k))
    silent |= Q(heartbeat_at__isnull=True, state_changed_at__lt=now - timedelta(seconds=10 * k))
    return Job.objects.filter(state__in=(State.RESERVED, State.RUNNING)).filter(Q(lease_expires_at__lt=now) | silent)


def stuck_count(now) -> int:
    """How many leases ``stuck_leases`` lists (the snapshot's count, for the home and the navigation)."""
    return stuck_jobs(now).count()
