"""Per-host politeness shared by all workers on all hosts, with its state in PostgreSQL.

``host_acquire`` takes the host's single in-flight slot in one guarded statement, only when the
host's delay has passed and its circuit breaker is closed; otherwise it answers how long to wait.
``host_release`` frees the slot and sets when the next request may go: after the host's delay, or
after the Retry-After the host asked for (capped). Repeated failures (5xx, timeouts) open the
breaker for a cool-off period.

A worker never sleeps on a busy host: ``polite`` raises ``HostBusy`` (a ``Deferred``: the job is
handed back without using its retry budget) carrying the wait as ``retry_after``. The wait is a
reserved turn: each refused caller books the next free time slot of the host, one delay apart, so
fifty analysis jobs for one site come back one after another instead of all at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection

from jobs.errors import Deferred


@dataclass(frozen=True)
class PolitenessPolicy:
    min_delay_seconds: float = 1.0
    retry_after_cap_seconds: float = 600.0
    crawl_delay_cap_seconds: float = 60.0
    # The longest a job waits for a host's turn before it asks again (turns are never booked further).
    max_wait_seconds: float = 3600.0
    # The slot is held at most this long, so a worker that dies mid-request cannot block the host.
    hold_seconds: float = 60.0
    failures_to_open: int = 5
    open_for_seconds: float = 300.0


class HostBusy(Deferred):
    """The host is busy, resting between requests, or its breaker is open: come back at the booked turn."""

    def __init__(self, host: str, wait_seconds: float, reason: str) -> None:
        super().__init__(f"{host}: {reason}; turn booked in {wait_seconds:.1f} s", retry_after=wait_seconds)


def spacing_seconds(policy: PolitenessPolicy, crawl_delay: float | None) -> float:
    """Seconds between two requests to a host: the policy's minimum, or the site's Crawl-delay up to
    the cap (a value that is not a finite number counts as none)."""
    delay = crawl_delay if crawl_delay is not None and math.isfinite(crawl_delay) and crawl_delay > 0 else 0.0
    return max(policy.min_delay_seconds, min(delay, policy.crawl_delay_cap_seconds))


_ACQUIRE_SQL = """
-- One statement: a new host gets its row with the slot taken; an existing host's slot is taken only
-- when it is free, its delay has passed and its breaker is closed. ON CONFLICT locks the row, so
-- concurrent workers on any host serialise here and exactly one of them gets the slot.
INSERT INTO workers_hoststate AS h (host, next_allowed_at, in_flight_until, consecutive_failures, last_outcome)
VALUES (%(host)s, leitstand_now(), leitstand_now() + %(hold)s * interval '1 second', 0, '')
ON CONFLICT (host) DO UPDATE SET in_flight_until = EXCLUDED.in_flight_until
WHERE coalesce(h.in_flight_until, '-infinity') <= leitstand_now()
  AND h.next_allowed_at <= leitstand_now()
  AND coalesce(h.breaker_open_until, '-infinity') <= leitstand_now()
RETURNING 1
"""

_BOOK_SQL = """
-- The host is not free: book the caller's turn. A request in flight is expected to end within one
-- spacing (its hold limit is only the bound for a dead worker); the next turn is after the latest
-- of the booked turns, the host's delay and its breaker, and moves the booking one spacing on.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
turn AS (
    SELECT h.host, greatest(
        coalesce(h.next_turn_at, '-infinity'), h.next_allowed_at, coalesce(h.breaker_open_until, '-infinity'),
        CASE WHEN coalesce(h.in_flight_until, '-infinity') > clock.now
             THEN clock.now + %(spacing)s * interval '1 second' ELSE clock.now END) AS at
    FROM workers_hoststate AS h, clock WHERE h.host = %(host)s
    FOR UPDATE OF h
)
-- A turn further out than the longest wait is not booked: the caller waits that long and asks
-- again, so callers refused far out never push the host's bookings further for everyone after them.
UPDATE workers_hoststate AS h SET next_turn_at = CASE
    WHEN turn.at - clock.now <= %(max_wait)s * interval '1 second' THEN turn.at + %(spacing)s * interval '1 second'
    ELSE h.next_turn_at END
FROM turn, clock
WHERE h.host = turn.host
RETURNING turn.at - clock.now,
          coalesce(h.breaker_open_until, '-infinity') > clock.now,
          coalesce(h.in_flight_until, '-infinity') > clock.now
"""

_RELEASE_SQL = """
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now)
UPDATE workers_hoststate AS h
SET in_flight_until = NULL,
    next_allowed_at = clock.now + %(wait)s * interval '1 second',
    consecutive_failures = CASE WHEN %(ok)s THEN 0 ELSE h.consecutive_failures + 1 END,
    breaker_open_until = CASE
        WHEN %(ok)s THEN NULL
        WHEN h.consecutive_failures + 1 >= %(failures_to_open)s THEN clock.now + %(open_for)s * interval '1 second'
        ELSE h.breaker_open_until END,
    last_outcome = %(outcome)s
FROM clock
WHERE h.host = %(host)s
"""


@dataclass(frozen=True)
class Turn:
    wait_seconds: float  # 0.0: the slot is yours now
    reason: str = ""


def host_acquire(host: str, policy: PolitenessPolicy, *, crawl_delay: float | None = None) -> Turn:
    """Take the host's in-flight slot now, or book the next turn and say how long to wait (never sleeps)."""
    with connection.cursor() as cursor:
        cursor.execute(_ACQUIRE_SQL, {"host": host, "hold": policy.hold_seconds})
        if cursor.fetchone():
            return Turn(0.0)
        cursor.execute(
            _BOOK_SQL,
            {"host": host, "spacing": spacing_seconds(policy, crawl_delay), "max_wait": policy.max_wait_seconds},
        )
        row = cursor.fetchone()
    if row is None:  # the row vanished between the two statements: try again soon
        return Turn(0.01, "host state was reset")
    wait, is_breaker_open, is_in_flight = row
    reason = (
        "circuit breaker open after repeated failures"
        if is_breaker_open
        else "a request to this host is in flight"
        if is_in_flight
        else "resting between requests"
    )
    return Turn(max(wait.total_seconds(), 0.01), reason)


def host_release(
    host: str,
    policy: PolitenessPolicy,
    *,
    ok: bool,
    outcome: str,
    crawl_delay: float | None = None,
    retry_after: float | None = None,
) -> None:
    """Free the slot; the next request waits the larger of the host's delay and its Retry-After (capped)."""
    asked = retry_after if retry_after is not None and math.isfinite(retry_after) and retry_after > 0 else 0.0
    wait = max(spacing_seconds(policy, crawl_delay), min(asked, policy.retry_after_cap_seconds))
    with connection.cursor() as cursor:
        cursor.execute(
            _RELEASE_SQL,
            {
                "host": host,
                "wait": wait,
                "ok": ok,
                "outcome": outcome[:200],
                "failures_to_open": policy.failures_to_open,
                "open_for": policy.open_for_seconds,
            },
        )


@contextmanager
def polite(host: str, policy: PolitenessPolicy, *, crawl_delay: float | None = None) -> Iterator[dict]:
    """Run one request to ``host`` politely. The block sets ``outcome["ok"]`` (and optionally
    ``outcome["retry_after"]``, ``outcome["status"]``); an exception counts as a failure."""
    turn = host_acquire(host, policy, crawl_delay=crawl_delay)
    if turn.wait_seconds > policy.max_wait_seconds:
        raise HostBusy(
            host,
            policy.max_wait_seconds,
            f"{turn.reason}; its turns are booked {turn.wait_seconds / 3600:.1f} h ahead, so this job asks again then",
        )
    if turn.wait_seconds:
        raise HostBusy(host, turn.wait_seconds, turn.reason)
    outcome: dict = {"ok": False, "status": "no answer"}
    try:
        yield outcome
    except BaseException as exc:
        outcome.update(ok=False, status=type(exc).__name__)
        raise
    finally:
        host_release(
            host,
            policy,
            ok=bool(outcome["ok"]),
            outcome=str(outcome["status"]),
            crawl_delay=crawl_delay,
            retry_after=outcome.get("retry_after"),
        )
