"""An operator's settings of one flow key in one pool (issue 39): its weight in the pool's fair share,
its running limit, its rate limit (starts per interval), and whether it is paused. The console and
the API change them only here; the claim reads them (jobs/queries.sql, ``flow_lanes_due``);
docs/operations.md, "Fair shares", says how to choose them. Each change is the caller's to audit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction

from jobs import leases, reads
from jobs.models import FlowKey, LeitstandNow, database_now
from jobs.services import JobInputError, flow_key_named, flow_key_stored, text_check
from jobs.sql import queries

MAX_WEIGHT = 1000
MAX_LIMIT = 100_000
MAX_RATE_STARTS = 1_000_000
MAX_RATE_SECONDS = 86_400


@dataclass(frozen=True)
class Unchanged:
    """A setting the caller leaves as it is."""


UNCHANGED = Unchanged()


def flow_key_set(
    *,
    pool: str,
    key: str,
    actor: str,
    reason: str,
    weight: int | Unchanged = UNCHANGED,
    max_running: int | None | Unchanged = UNCHANGED,
    paused: bool | Unchanged = UNCHANGED,
    rate: tuple[int, int] | None | Unchanged = UNCHANGED,
) -> FlowKey:
    """Set a key's weight (1–1000), running limit (1–100,000; None: the pool's default), rate limit
    (``rate``: at most so many starts, 1–1,000,000, per so many seconds, 1–86,400; None: none) or
    pause (``reason`` required, 1–500 printable characters); what is not named stays.
    ``JobInputError`` names the field. Takes effect for the claims from a second later, on every
    host; a changed rate counts what the key started under the old one (its bucket) at the new one's
    spacing."""
    text_check("pool", pool, limit=64)
    text_check("key", key, limit=255)
    key = flow_key_stored(key)  # named as people name it; stored as jobs carry it ("Bücher": B%C3%BCcher)
    text_check("actor", actor, limit=255)
    reason = reason.strip() if isinstance(reason, str) else reason
    if not isinstance(reason, str) or not reason:
        raise JobInputError("reason", "is required: say why this key's share changes")
    text_check("reason", reason, limit=500)
    if weight is not UNCHANGED and (
        isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT
    ):
        raise JobInputError("weight", f"must be a whole number from 1 to {MAX_WEIGHT}")
    if max_running is not UNCHANGED and max_running is not None:
        if isinstance(max_running, bool) or not isinstance(max_running, int) or not 1 <= max_running <= MAX_LIMIT:
            raise JobInputError("max_running", f"must be a whole number from 1 to {MAX_LIMIT:,}, or empty")
    if paused is not UNCHANGED and not isinstance(paused, bool):
        raise JobInputError("paused", "must be true or false")
    if rate is not UNCHANGED and rate is not None:
        starts, seconds = rate
        if isinstance(starts, bool) or not isinstance(starts, int) or not 1 <= starts <= MAX_RATE_STARTS:
            raise JobInputError("rate_starts", f"must be a whole number from 1 to {MAX_RATE_STARTS:,}")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_RATE_SECONDS:
            raise JobInputError("rate_seconds", f"must be a whole number of seconds from 1 to {MAX_RATE_SECONDS:,}")
    with transaction.atomic():
        settings, _ = FlowKey.objects.select_for_update().get_or_create(pool=pool, key=key)
        if weight is not UNCHANGED:
            settings.weight = weight
        if max_running is not UNCHANGED:
            settings.max_running = max_running
        if paused is not UNCHANGED:
            settings.paused = paused
        if rate is not UNCHANGED:
            settings.rate_tat = _bucket_carried(settings, rate)
            settings.rate_starts, settings.rate_seconds = rate or (None, None)
        settings.reason, settings.changed_by = reason, actor
        settings.save()
        FlowKey.objects.filter(pk=settings.pk).update(changed_at=LeitstandNow())
    leases.flow_settings_changed()
    settings.refresh_from_db()
    return settings


def flow_rests_set(*, pools: list[str], key: str, until: datetime) -> None:
    """Key ``key`` of each of ``pools`` starts no job before ``until`` (database time): the app whose
    work the key paces says when it may go on (the pipeline's politeness: when a host may next be
    asked). One statement, in the caller's transaction; no audit (no person decided it)."""
    if pools:
        with connection.cursor() as cursor:
            cursor.execute(queries.flow_rests_set, {"pools": list(pools), "key": flow_key_stored(key), "until": until})


def _bucket_carried(settings: FlowKey, rate: tuple[int, int] | None) -> datetime | None:
    """A key's bucket under its new rate: the starts the old rate still counted count at the new
    one's spacing (four starts of a minute's four count as half of a minute's eight), up to a full
    bucket of the new rate."""
    if rate is None or settings.rate_tat is None:
        return None
    now = database_now()
    if settings.rate_tat <= now:
        return settings.rate_tat
    counted = (settings.rate_tat - now) / (settings.rate_seconds / settings.rate_starts)
    # At most one full interval of the new rate: a lowered rate holds the key back for no longer
    # than its interval (600 a minute down to 10 a minute after a burst: one minute, not an hour).
    return now + min(counted * (rate[1] / rate[0]), timedelta(seconds=rate[1]))


def flow_keys(pool: str, *, limit: int = 100, after: str | None = None) -> list[dict]:
    """A pool's keys with work or settings, in stored key order after the key named ``after`` (None:
    from the first, the key '' of jobs without one included): each as named (``key``) and as jobs
    carry it (``stored``), waiting jobs (counted up to 10,000 per lane), oldest due,
    running, own limit, weight, pause, place in the fair share, rate limit and until when it holds
    the key back (``rate_limited_until``; None: it may start a job now) — what the console's key view
    and the API show. A page costs a few index probes per key, at any number of keys."""
    return _rows(pool=pool, after=None if after is None else flow_key_stored(after), limit=limit, one=False, key="")


def flow_key_read(pool: str, key: str) -> dict:
    """The row of the key named ``key`` as ``flow_keys`` gives it (with no work and no settings:
    zeros and defaults)."""
    (row,) = _rows(pool=pool, after=None, limit=1, one=True, key=flow_key_stored(key))
    return row


def rate_limited_until(settings: FlowKey | None, now: datetime) -> datetime | None:
    """When a key's rate limit lets its next job start, if that is after ``now`` (database time);
    None: no rate limit, or it may start one now."""
    if settings is None:
        return None
    return _rate_until(settings.rate_starts, settings.rate_seconds, settings.rate_tat, now)


def _rate_until(starts: int | None, seconds: int | None, tat: datetime | None, now: datetime) -> datetime | None:
    # The bucket allows a start once it is due less than rate_seconds minus one start's spacing
    # ahead (jobs/queries.sql, ``flow_lanes_due``).
    if starts is None or tat is None:
        return None
    until = tat - timedelta(seconds=seconds * (1 - 1 / starts))
    return until if until > now else None


def _rows(**params) -> list[dict]:
    names = ("key", "waiting", "oldest_due", "running", "max_running", "weight", "paused", "reason", "vtime")
    rows = []
    for row in reads.rows("flow_keys_of_pool", **params):
        *fields, rate_starts, rate_seconds, rate_tat, now = row
        rows.append(
            {
                **dict(zip(names, fields)),
                "key": flow_key_named(fields[0]),
                "stored": fields[0],
                "rate_starts": rate_starts,
                "rate_seconds": rate_seconds,
                "rate_limited_until": _rate_until(rate_starts, rate_seconds, rate_tat, now),
            }
        )
    return rows
