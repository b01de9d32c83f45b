"""Backpressure: a pool's bulk lane (priority 9, the lane bulk work is submitted in) takes no more
API submissions while it holds ``LEITSTAND_API_BULK_LANE_DEPTH`` planned jobs from a client that
holds its share of it already: they are answered 503 with ``Retry-After`` (``errors.LaneFull``),
nothing created, while submissions in the other lanes still pass — a flood of bulk work cannot bury
urgent work, and its client is told to slow down before the queue drowns (docs/api.md,
"Backpressure"). A client's share is the bound divided among the clients with bulk work in the lane,
itself included: one client's flood gets *its* submissions refused, not everyone's; a client below
its share still submits into a full lane (the bound is soft by the shares of the small clients).

And a client with its bound of open jobs (its own ``Client.max_open_jobs``, else
``LEITSTAND_API_CLIENT_OPEN_JOBS``) is answered 429 with ``Retry-After`` (``errors.OpenJobsFull``):
one client's million jobs cannot fill the pools for all.

The depth is counted through the claim's index (``lane_depth_capped`` in jobs/reads.sql: at most the
bound's entries), a client's open jobs through ``job_client_open_idx`` (``client_open_jobs_capped``),
and each count is kept for a second in each process: a bound is soft by at most a second of
submissions, and a full lane or client costs one count a second, not one per submission.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import connection
from prometheus_client import Counter

from api import options
from api.errors import LaneFull, OpenJobsFull
from api.models import ApiRefusalWindow
from jobs import reads
from workers.runtime.registry import registry

BULK_LANE = 9
CACHE_SECONDS = 1.0

# (read, pool or client ID) → (when counted, what was counted up to the bound)
_counted: dict[tuple[str, object], tuple[float, int]] = {}
REFUSED = Counter(
    "leitstand_api_refused_submissions", "API submissions refused to protect a pool, by reason", ["pool", "reason"]
)


def lane_check(job_type: str, priority: int | None, *, client, repeat: Callable[[], bool]) -> None:
    """Raise ``LaneFull`` for a submission of ``job_type`` to its pool's bulk lane (``priority``; None:
    the type's default) while that lane is full, unless ``repeat()``: the submission names what exists
    already (answered with it, nothing created: never refused). ``client``: whose refusal is counted."""
    bound = options.current().bulk_lane_depth
    declared = registry.get(job_type)
    if not bound or (declared.default_priority if priority is None else priority) != BULK_LANE:
        return
    pool = declared.pool  # an API client's jobs run in their type's pool (workers/runtime/services.py)
    if _count("lane_depth_capped", pool, pool=pool, priority=BULK_LANE, cap=bound) < bound:
        return
    if client is not None and _below_share(client, pool, bound):
        return
    if not repeat():
        _refusal_count(client, pool, ApiRefusalWindow.Reason.BULK_LANE_FULL)
        raise LaneFull(pool, bound, options.current().bulk_retry_after_seconds)


def _below_share(client, pool: str, bound: int) -> bool:
    """Whether ``client`` holds less of the full bulk lane than its share: the bound divided among the
    clients with bulk work in it, itself included (two counts, each kept a second, only while full)."""
    own = _count(
        "lane_client_depth_capped", (pool, client.pk), pool=pool, priority=BULK_LANE, client=client.pk, cap=bound
    )
    others = _count("lane_clients", pool, pool=pool, priority=BULK_LANE) - (1 if own else 0)
    return own < bound // (others + 1)


def open_jobs_check(client, jobs: int, *, pool: str, repeat: Callable[[], bool]) -> None:
    """Raise ``OpenJobsFull`` when ``client`` (None: the system's own, never bound) would have more
    than its bound of open jobs with the ``jobs`` this submission adds, unless ``repeat()``: the
    submission names what exists already. ``pool``: where the refusal is counted."""
    if client is None:
        return
    bound = options.current().client_open_jobs if client.max_open_jobs is None else client.max_open_jobs
    open_jobs = _count("client_open_jobs_capped", client.pk, client=client.pk, cap=bound) if bound else 0
    if bound and open_jobs + jobs > bound and not repeat():
        _refusal_count(client, pool, ApiRefusalWindow.Reason.CLIENT_OPEN_JOBS)
        raise OpenJobsFull(bound, options.current().open_jobs_retry_after_seconds)


# One statement per refusal: add it to the minute's window of its client, pool and reason; as a
# statement of its own it commits without waiting for the disk, as the API's budget counts do
# (api/tokens.py; inside a caller's transaction it commits with it). Each process tidies up windows
# older than a day (longer than any alert window: LEITSTAND_ALERTS' api_submissions_refused) at
# most once a minute, after a refusal: a refused flood adds one small write per request.
_REFUSAL_SQL = """
    WITH relaxed AS (SELECT CASE WHEN %(relaxed)s THEN set_config('synchronous_commit', 'off', true) END)
    INSERT INTO api_apirefusalwindow AS w (client_id, pool, reason, window_start, refused)
    SELECT %(client)s, %(pool)s, %(reason)s, date_trunc('minute', leitstand_now()), 1 FROM relaxed
    ON CONFLICT (client_id, pool, reason, window_start) DO UPDATE SET refused = w.refused + 1"""
_REFUSAL_TIDY_SQL = "DELETE FROM api_apirefusalwindow WHERE window_start < leitstand_now() - interval '1 day'"
TIDY_SECONDS = 60.0
_tidied = [0.0]  # when this process last tidied (monotonic)


def _refusal_count(client, pool: str, reason: str) -> None:
    """Count a refusal where the metric and the alert rule ``api_submissions_refused`` see it."""
    REFUSED.labels(pool, reason).inc()
    with connection.cursor() as cursor:
        cursor.execute(
            _REFUSAL_SQL,
            {
                "client": client.pk if client else None,
                "pool": pool,
                "reason": reason,
                "relaxed": not connection.in_atomic_block,
            },
        )
        if time.monotonic() - _tidied[0] > TIDY_SECONDS:
            _tidied[0] = time.monotonic()
            cursor.execute(_REFUSAL_TIDY_SQL)


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
