"""Per-host politeness shared by all workers on all hosts, with its state in PostgreSQL.

One definition of a host's delay: **start to start**, with at most one request in flight. A request
may start when the host's slot is free, its breaker is closed and ``next_allowed_at`` has come;
taking the slot (``host_acquire``, one guarded statement) sets ``next_allowed_at`` to this start plus
the host's delay at once, so a turn booked for a waiting job and the host's rest are counted from the
same instant and agree. ``host_release`` frees the slot and lets the host's answer move its delay:

- **the delay follows the host** (as Scrapy's AutoThrottle and Heritrix's delay factor do): an answer
  that took *t* seconds moves the delay halfway towards ``delay_factor`` × *t*; an error, a timeout,
  429 or 503 doubles it (an error never speeds a host up); it never falls below the configured
  minimum nor the robots.txt ``Crawl-delay``, and never rises above ``crawl_delay_cap_seconds``;
- a ``Retry-After`` holds the host that long from the answer (capped), and repeated failures open the
  breaker for a cool-off period.

A worker never sleeps on a busy host: ``polite`` raises ``HostBusy`` (a ``Deferred``: the job is
handed back without using its retry budget) carrying the wait as ``retry_after``. The wait is a
reserved turn: each refused caller books the next free turn of the host, one delay apart, so fifty
analysis jobs for one site come back one after another instead of all at once. The one exception is
the request right after a job's own robots.txt request (``patience_seconds``): the job waits out that
one delay in place instead of going back into line. Pools whose jobs are keyed by host are told when
each host may next be asked (``jobs.flows.flow_rests_set``), so their claim takes no page of a host
that is resting: politeness is decided where work is claimed, and a deferral is the exception.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from jobs import flows
from jobs.errors import Deferred
from workers.runtime.registry import registry


@dataclass(frozen=True)
class PolitenessPolicy:
    min_delay_seconds: float = 1.0
    retry_after_cap_seconds: float = 600.0
    # The most a host's delay becomes, whether a robots.txt Crawl-delay or its slow answers ask more.
    crawl_delay_cap_seconds: float = 60.0
    # The delay after an answer that took t seconds is at least delay_factor × t (Heritrix's factor).
    delay_factor: float = 2.0
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
    """The least delay between two requests to a host: the policy's minimum, or the site's
    Crawl-delay up to the cap (a value that is not a finite number counts as none)."""
    delay = crawl_delay if crawl_delay is not None and math.isfinite(crawl_delay) and crawl_delay > 0 else 0.0
    return max(policy.min_delay_seconds, min(delay, policy.crawl_delay_cap_seconds))


# The host's delay now: what its answers taught (delay_seconds), never below the least delay.
_DELAY = "greatest(coalesce(h.delay_seconds, 0), %(floor)s)"

_ACQUIRE_SQL = f"""
-- One statement: a new host gets its row with the slot taken; an existing host's slot is taken only
-- when it is free, its delay has passed and its breaker is closed. ON CONFLICT locks the row, so
-- concurrent workers on any host serialise here and exactly one of them gets the slot. The next
-- start is allowed one delay after this one (start to start).
INSERT INTO workers_hoststate AS h (host, next_allowed_at, in_flight_until, last_started_at, consecutive_failures,
                                    last_outcome)
VALUES (%(host)s, leitstand_now() + %(floor)s * interval '1 second', leitstand_now() + %(hold)s * interval '1 second',
        leitstand_now(), 0, '')
ON CONFLICT (host) DO UPDATE SET in_flight_until = EXCLUDED.in_flight_until, last_started_at = EXCLUDED.last_started_at,
    next_allowed_at = EXCLUDED.last_started_at + {_DELAY} * interval '1 second'
WHERE coalesce(h.in_flight_until, '-infinity') <= leitstand_now()
  AND h.next_allowed_at <= leitstand_now()
  AND coalesce(h.breaker_open_until, '-infinity') <= leitstand_now()
RETURNING 1
"""

_BOOK_SQL = f"""
-- The host is not free: book the caller's turn, the first free one from when the host may next be
-- asked (a start already set it one delay after the request in flight began). A request still in
-- flight past that (an answer slower than the delay) pushes the turn one delay beyond now. The
-- booking moves one delay on.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
turn AS (
    SELECT h.host, {_DELAY} AS spacing, greatest(
        coalesce(h.next_turn_at, '-infinity'), h.next_allowed_at, coalesce(h.breaker_open_until, '-infinity'),
        CASE WHEN coalesce(h.in_flight_until, '-infinity') > clock.now
             THEN clock.now + {_DELAY} * interval '1 second' ELSE clock.now END) AS at
    FROM workers_hoststate AS h, clock WHERE h.host = %(host)s
    FOR UPDATE OF h
)
-- A turn further out than the longest wait is not booked: the caller waits that long and asks
-- again, so callers refused far out never push the host's bookings further for everyone after them.
UPDATE workers_hoststate AS h SET next_turn_at = CASE
    WHEN turn.at - clock.now <= %(max_wait)s * interval '1 second' THEN turn.at + turn.spacing * interval '1 second'
    ELSE h.next_turn_at END
FROM turn, clock
WHERE h.host = turn.host
RETURNING turn.at - clock.now,
          coalesce(h.breaker_open_until, '-infinity') > clock.now,
          coalesce(h.in_flight_until, '-infinity') > clock.now
"""

_RELEASE_SQL = """
-- Free the slot and learn from the answer: a success moves the delay halfway towards
-- %(factor)s × the answer's time, a failure doubles it; never below %(floor)s nor above %(cap)s.
-- The next start waits for the new delay from this request's start — when it went out, as the client
-- timed its answer (now - %(answer)s), if that was later than taking the slot — and for a
-- Retry-After from now.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
learned AS (
    SELECT h.host, least(%(cap)s, greatest(%(floor)s, CASE
        WHEN %(ok)s THEN (greatest(coalesce(h.delay_seconds, 0), %(floor)s) + greatest(%(answer)s * %(factor)s, %(floor)s)) / 2
        ELSE greatest(coalesce(h.delay_seconds, 0), %(floor)s) * 2 END)) AS delay
    FROM workers_hoststate AS h WHERE h.host = %(host)s
)
UPDATE workers_hoststate AS h
SET in_flight_until = NULL,
    delay_seconds = learned.delay,
    next_allowed_at = greatest(
        h.next_allowed_at,
        greatest(coalesce(h.last_started_at, clock.now), clock.now - %(answer)s * interval '1 second')
            + learned.delay * interval '1 second',
        clock.now + %(wait)s * interval '1 second'),
    consecutive_failures = CASE WHEN %(ok)s THEN 0 ELSE h.consecutive_failures + 1 END,
    breaker_open_until = CASE
        WHEN %(ok)s THEN NULL
        WHEN h.consecutive_failures + 1 >= %(failures_to_open)s THEN clock.now + %(open_for)s * interval '1 second'
        ELSE h.breaker_open_until END,
    last_outcome = %(outcome)s
FROM clock, learned
WHERE h.host = learned.host
RETURNING greatest(h.next_allowed_at, coalesce(h.breaker_open_until, '-infinity'))
"""


@dataclass(frozen=True)
class Turn:
    wait_seconds: float  # 0.0: the slot is yours now
    reason: str = ""


def host_acquire(host: str, policy: PolitenessPolicy, *, crawl_delay: float | None = None) -> Turn:
    """Take the host's in-flight slot now, or book the next turn and say how long to wait (never sleeps)."""
    floor = spacing_seconds(policy, crawl_delay)
    with connection.cursor() as cursor:
        cursor.execute(_ACQUIRE_SQL, {"host": host, "hold": policy.hold_seconds, "floor": floor})
        if cursor.fetchone():
            return Turn(0.0)
        cursor.execute(_BOOK_SQL, {"host": host, "floor": floor, "max_wait": policy.max_wait_seconds})
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
    answer_seconds: float = 0.0,
) -> datetime | None:
    """Free the slot and learn from the answer (``answer_seconds``: how long it took; ``ok``: whether
    it was one, not an error); the next request waits the host's new delay from this one's start and
    any Retry-After from now (capped). Returns when the host may next be asked."""
    asked = retry_after if retry_after is not None and math.isfinite(retry_after) and retry_after > 0 else 0.0
    answer = answer_seconds if math.isfinite(answer_seconds) and answer_seconds > 0 else 0.0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _RELEASE_SQL,
            {
                "host": host,
                "floor": spacing_seconds(policy, crawl_delay),
                "cap": max(policy.crawl_delay_cap_seconds, policy.min_delay_seconds),
                "factor": policy.delay_factor,
                "answer": answer,
                "wait": min(asked, policy.retry_after_cap_seconds),
                "ok": ok,
                "outcome": outcome[:200],
                "failures_to_open": policy.failures_to_open,
                "open_for": policy.open_for_seconds,
            },
        )
        row = cursor.fetchone()
        rests_until = row[0] if row else None
        if rests_until is not None:
            # In the same transaction: the claim of a host-keyed pool (crawl) takes no page of this host
            # before then, so its jobs arrive when the host may be asked instead of being handed back.
            flows.flow_rests_set(pools=registry.pools_keyed_by("host"), key=host, until=rests_until)
    return rests_until


@contextmanager
def polite(
    host: str, policy: PolitenessPolicy, *, crawl_delay: float | None = None, patience_seconds: float = 0.0
) -> Iterator[dict]:
    """Run one request to ``host`` politely. The block sets ``outcome["ok"]`` (and optionally
    ``outcome["retry_after"]``, ``outcome["status"]``, ``outcome["seconds"]``: the answer's time, else
    the block's); an exception counts as a failure. ``patience_seconds``: a host merely resting for at
    most this long is waited for in place (the request right after this job's own robots.txt)."""
    turn = host_acquire(host, policy, crawl_delay=crawl_delay)
    if turn.wait_seconds and turn.wait_seconds <= patience_seconds and turn.reason == "resting between requests":
        time.sleep(turn.wait_seconds)
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
    began = time.monotonic()
    try:
        yield outcome
    except BaseException as exc:
        if outcome["status"] == "no answer":  # an answer the block judged before raising keeps its judgement
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
            answer_seconds=float(outcome.get("seconds") or time.monotonic() - began),
        )
