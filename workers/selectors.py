"""Read-only queries of the workers app."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q

from jobs.models import LeitstandNow
from workers.models import WorkerProcess

# A worker whose registry row was not refreshed for this long counts as gone. Rows are refreshed
# every 5 s by the heartbeat thread, so three missed refreshes mean the process is dead or stuck.
LIVE_WITHIN_SECONDS = 15


def pool_consumers(*, live_within_seconds: float = LIVE_WITHIN_SECONDS) -> dict[str, int]:
    """Live worker processes per pool, judged by the age of their last refresh in database time
    (never by what a process last said about itself). Pools without any are listed with 0."""
    cutoff = LeitstandNow() - timedelta(seconds=live_within_seconds)
    live = dict(WorkerProcess.objects.filter(stopped_at__isnull=True).values("pool")
                .annotate(n=Count("id", filter=Q(last_seen_at__gte=cutoff))).values_list("pool", "n"))
    return {pool: live.get(pool, 0) for pool in settings.LEITSTAND_POOLS}
