"""Read-only queries of the workers app."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from jobs.models import LeitstandNow
from workers.runtime import options
from workers.runtime.models import Pool, WorkerProcess

# A worker whose registry row was not refreshed for this long counts as gone. Rows are refreshed
# every 5 s by the heartbeat thread, so three missed refreshes mean the process is dead or stuck.
LIVE_WITHIN_SECONDS = 15


def live_workers(*, live_within_seconds: float = LIVE_WITHIN_SECONDS) -> QuerySet[WorkerProcess]:
    """Worker processes judged alive by the age of their last refresh in database time (never by
    what a process last said about itself)."""
    cutoff = LeitstandNow() - timedelta(seconds=live_within_seconds)
    return WorkerProcess.objects.filter(stopped_at__isnull=True, last_seen_at__gte=cutoff)


def pool_consumers(*, live_within_seconds: float = LIVE_WITHIN_SECONDS) -> dict[str, int]:
    """Live worker processes per pool, in one query; pools without any are listed with 0."""
    live = dict(
        live_workers(live_within_seconds=live_within_seconds)
        .values("pool")
        .annotate(n=Count("id"))
        .values_list("pool", "n")
    )
    return {pool: live.get(pool, 0) for pool in options.current().pools}


def pools_with_consumers() -> QuerySet[Pool]:
    """Pools annotated with ``live_consumers``, counted in the same query."""
    counted = live_workers().filter(pool=OuterRef("name")).order_by().values("pool").annotate(n=Count("id")).values("n")
    return Pool.objects.annotate(live_consumers=Coalesce(Subquery(counted), 0))
