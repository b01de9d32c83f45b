"""Wake-ups: hints that a pool has due work. The job rows are the truth.

A wake-up is a django-q2 task ``workers.tasks.wake(pool)`` on the pool's cluster. Receiving one
twice is harmless (the claim finds nothing or other work); losing one is harmless (the control
process's dispatcher, ``dispatch_sweep``, sends wake-ups for due work whose wake-up went missing).
Wake-ups per pool are bounded, so a flood of jobs costs a handful of queue rows, not one per job.

The broker is django-q2's ORM broker on PostgreSQL, or Redis (``LEITSTAND_WAKEUP_REDIS_URL``). A
broker that cannot be reached loses wake-ups, never work: sending one then only logs, and the pools
wake themselves (``workers/runtime/supervisor/``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from jobs import reads
from workers.runtime import options

logger = logging.getLogger("leitstand.dispatch")

# At high submission rates, one wake-up per pool per this interval from one process is plenty:
# each wake-up drains the pool's due work in batches.
_THROTTLE_SECONDS = 0.05
_last_sent: dict[str, float] = {}
_broker_away = False  # reported once per outage, not at every wake-up or sweep


# The pools whose jobs this process is claiming right now in a loop of its own (a network-bound pool's
# in-flight wake-up): it finds their new jobs itself, so it sends them no wake-up.
_claiming_here: set[str] = set()


@contextmanager
def claiming_here(pool: str) -> Iterator[None]:
    _claiming_here.add(pool)
    try:
        yield
    finally:
        _claiming_here.discard(pool)


def wakeup_after_commit(pool: str) -> None:
    """Wake the pool once the current transaction commits (nothing is sent if it rolls back), unless
    this process is claiming the pool's jobs right now (a crawl page's children: its own loop takes
    them when their host may be asked)."""
    if pool not in _claiming_here:
        transaction.on_commit(lambda: wakeup_send(pool, throttle=True))


def broker_errors() -> tuple[type[Exception], ...]:
    """What a broker that cannot be reached raises (none for the ORM broker: that is the database,
    whose errors are the caller's)."""
    if options.current().wakeup_redis_url:
        import redis

        return (redis.RedisError,)
    return ()


def wakeup_send(pool: str, *, count: int = 1, throttle: bool = False) -> int:
    """Queue ``count`` wake-ups for ``pool``; how many were sent. A tasks-only process sends none: it
    may not reach the broker (whose wake-ups other pools run), and the control process's dispatcher
    wakes the pools its tasks enqueue work for."""
    from django_q.tasks import async_task

    if options.current().tasks_only:
        return 0
    now = time.monotonic()
    if throttle and now - _last_sent.get(pool, 0.0) < _THROTTLE_SECONDS:
        return 0
    _last_sent[pool] = now
    sent = 0
    try:
        while sent < count:
            async_task("workers.tasks.wake", pool, cluster=pool, ack_failure=True)
            sent += 1
    except broker_errors() as unreachable:
        broker_reachable(False, unreachable)
    return sent


def broker_reachable(reachable: bool, error: Exception | None = None) -> None:
    """Report a broker that cannot be reached once per outage, and when it is back."""
    global _broker_away
    if not reachable and not _broker_away:
        logger.warning("the wake-up broker cannot be reached (%s); the pools wake themselves", error)
    elif reachable and _broker_away:
        logger.warning("the wake-up broker is reachable again")
    _broker_away = not reachable


def outstanding_wakeups() -> dict[str, int]:
    """Wake-ups waiting in each pool's queue, not yet fetched by a worker (django-q2's ORM broker
    locks a fetched row until its retry time and counts only unlocked ones: a row whose worker died
    stays locked that long, so counting it would starve the pool)."""
    if options.current().wakeup_redis_url:
        from django_q.brokers import get_broker

        return {pool: get_broker(list_key=pool).queue_size() for pool in options.current().pools}
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, count(*) FROM django_q_ormq WHERE lock <= now() GROUP BY key")
        return dict(cursor.fetchall())


def due_jobs(pool: str, *, cap: int) -> int:
    """Due planned jobs of a pool, counted up to ``cap`` (an exact count is never needed here)."""
    return reads.row("due_count_capped", pool=pool, cap=cap)[0]
