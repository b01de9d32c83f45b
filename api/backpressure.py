"""Backpressure: a pool's bulk lane (priority 9, the lane bulk work is submitted in) takes no more
API submissions while it holds ``LEITSTAND_API_BULK_LANE_DEPTH`` planned jobs: they are answered 503
with ``Retry-After`` (``errors.LaneFull``), nothing created, while submissions in the other lanes
still pass — a flood of bulk work cannot bury urgent work, and its client is told to slow down
before the queue drowns (docs/api.md, "Backpressure"). And a client with its bound of open jobs
(its own ``Client.max_open_jobs``, else ``LEITSTAND_API_CLIENT_OPEN_JOBS``) is answered 429 with
``Retry-After`` (``errors.OpenJobsFull``): one client's million jobs cannot fill the pools for all.

The depth is counted through the claim's index (``lane_depth_capped`` in jobs/reads.sql: at most the
bound's entries), a client's open jobs through ``job_client_open_idx`` (``client_open_jobs_capped``),
and each count is kept for a second in each process: a bound is soft by at most a second of
submissions, and a full lane or client costs one count a second, not one per submission.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import Counter

from api import options
from api.errors import LaneFull, OpenJobsFull
from jobs import reads
from workers.runtime.registry import registry

BULK_LANE = 9
CACHE_SECONDS = 1.0

# (read, pool or client ID) → (when counted, what was counted up to the bound)
_counted: dict[tuple[str, object], tuple[float, int]] = {}
REFUSED = Counter(
    "leitstand_api_refused_submissions", "API submissions refused to protect a pool, by reason", ["pool", "reason"]
)


def lane_check(job_type: str, priority: int | None, *, repeat: Callable[[], bool]) -> None:
    """Raise ``LaneFull`` for a submission of ``job_type`` to its pool's bulk lane (``priority``; None:
    the type's default) while that lane is full, unless ``repeat()``: the submission names what exists
    already (answered with it, nothing created: never refused)."""
    bound = options.current().bulk_lane_depth
    declared = registry.get(job_type)
    if not bound or (declared.default_priority if priority is None else priority) != BULK_LANE:
        return
    pool = declared.pool  # an API client's jobs run in their type's pool (workers/runtime/services.py)
    if _count("lane_depth_capped", pool, pool=pool, priority=BULK_LANE, cap=bound) >= bound and not repeat():
        REFUSED.labels(pool, "bulk_lane_full").inc()
        raise LaneFull(pool, bound, options.current().bulk_retry_after_seconds)


def open_jobs_check(client, jobs: int, *, pool: str, repeat: Callable[[], bool]) -> None:
    """Raise ``OpenJobsFull`` when ``client`` (None: the system's own, never bound) would have more
    than its bound of open jobs with the ``jobs`` this submission adds, unless ``repeat()``: the
    submission names what exists already. ``pool``: where the refusal is counted."""
    if client is None:
        return
    bound = options.current().client_open_jobs if client.max_open_jobs is None else client.max_open_jobs
    open_jobs = _count("client_open_jobs_capped", client.pk, client=client.pk, cap=bound) if bound else 0
    if bound and open_jobs + jobs > bound and not repeat():
        REFUSED.labels(pool, "client_open_jobs").inc()
        raise OpenJobsFull(bound, options.current().open_jobs_retry_after_seconds)


def _count(read: str, subject, **params) -> int:
    """The capped count ``read`` of jobs/reads.sql for ``subject``, as counted at most a second ago."""
    now = time.monotonic()
    counted = _counted.get((read, subject))
    if counted is None or now - counted[0] > CACHE_SECONDS:
        counted = (now, reads.row(read, **params)[0])
        _counted[(read, subject)] = counted
    return counted[1]


def forget() -> None:
    """Count afresh on the next check (tests)."""
    _counted.clear()
