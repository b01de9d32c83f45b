"""Sources crawl themselves: one run per slot of a source's schedule, planned by the control process.

A source's schedule is an interval (``crawl_every_minutes``, else ``LEITSTAND_CRAWL_EVERY_MINUTES``)
and an optional window of local time (``window_start`` … ``window_end``, which may pass midnight) in
the source's time zone (else ``LEITSTAND_TIME_ZONE``). Slots are counted in local wall-clock time
from a Monday midnight, so a daily schedule's slot starts at local midnight and a weekly one's on
Monday. The current slot is due when

- no run was started for it yet (``last_slot_at`` is older) — after downtime the sources that
  missed several slots are crawled once, for the current slot, never once per missed slot;
- the local time lies inside the window (if any);
- the source's previous run (its batch) has finished;
- the source is active and the crawl pool is not paused.

``schedule_sweep`` (the control process, every ``LEITSTAND_CRAWL_SCHEDULE_SECONDS``) starts the due runs, most urgent
source first, through ``crawl_start`` with the run named after the source and slot: the batch and
its first job are idempotent per name, so two control processes, a restart or a failover never start
a slot twice. ``schedule_of`` answers the same question for the console and the API, with the next
run's time and why a source waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Exists, QuerySet

from jobs.models import LeitstandNow, database_now
from jobs.services import JobInputError
from workers.pipeline import options
from workers.pipeline.models import Source
from workers.runtime.models import Pool

logger = logging.getLogger(__name__)

# Slots are counted from here (local wall-clock time): a Monday at midnight.
_EPOCH = datetime(2000, 1, 3)
MAX_EVERY_MINUTES = 31 * 24 * 60


@dataclass(frozen=True)
class ScheduleState:
    every_minutes: int
    slot_at: datetime  # the current slot's start
    due: bool
    next_at: datetime | None  # when the next run will start, as far as the schedule knows; None: not while it waits
    waiting: str  # why it does not run now ("" when due)


def every_minutes(source: Source) -> int:
    return source.crawl_every_minutes or options.current().crawl_every_minutes


def zone_of(source: Source) -> ZoneInfo:
    return ZoneInfo(source.time_zone or options.current().time_zone)


def _slot_start(local: datetime, minutes: int) -> datetime:
    """The start of the slot that holds ``local`` (naive local time)."""
    elapsed = int((local - _EPOCH).total_seconds() // 60)
    return _EPOCH + timedelta(minutes=elapsed - elapsed % minutes)


def _in_window(moment: time, start: time, end: time) -> bool:
    if start <= end:
        return start <= moment < end
    return moment >= start or moment < end  # the window passes midnight


def _window_opens(local: datetime, start: time) -> datetime:
    """The next local time the window opens at or after ``local``."""
    opening = datetime.combine(local.date(), start)
    return opening if opening >= local else opening + timedelta(days=1)


def _aware(local: datetime, zone: ZoneInfo) -> datetime:
    return local.replace(tzinfo=zone).astimezone(UTC)


def current_slot(source: Source, now: datetime) -> datetime:
    """The start of the source's slot that holds ``now``."""
    zone = zone_of(source)
    return _aware(_slot_start(now.astimezone(zone).replace(tzinfo=None), every_minutes(source)), zone)


def schedule_of(source: Source, *, now: datetime, run_open: bool, pool_paused: bool) -> ScheduleState:
    """Whether the source's current slot is due at ``now`` (database time), and if not, why and until when.
    ``run_open``: its previous run has not finished; ``pool_paused``: the crawl pool is paused."""
    minutes, zone = every_minutes(source), zone_of(source)
    local = now.astimezone(zone).replace(tzinfo=None)
    slot_at = current_slot(source, now)
    slot = slot_at.astimezone(zone).replace(tzinfo=None)
    taken = source.last_slot_at is not None and source.last_slot_at >= slot_at
    # The next moment a run may start: this slot if it is still open, else the next slot.
    candidate = local if not taken else slot + timedelta(minutes=minutes)
    windowed = source.window_start is not None and source.window_end is not None
    if windowed and not _in_window(candidate.time(), source.window_start, source.window_end):
        candidate = _window_opens(candidate, source.window_start)
    next_at = _aware(candidate, zone)

    def waits(reason: str, until: datetime | None = next_at) -> ScheduleState:
        return ScheduleState(minutes, slot_at, False, until, reason)

    if not source.is_active:
        return waits("source paused (inactive)", None)
    if pool_paused:
        return waits("crawl pool paused", None)
    if run_open:
        return waits("previous run still running", None)
    if taken:
        return waits(f"this slot's run started; next slot at {candidate:%Y-%m-%d %H:%M}")
    if windowed and not _in_window(local.time(), source.window_start, source.window_end):
        return waits(f"window opens at {source.window_start:%H:%M}")
    return ScheduleState(minutes, slot_at, True, next_at, "")


def run_name(source: Source, slot_at: datetime) -> str:
    """The run (and its batch key) of a source's slot: the same name in every control process."""
    return f"schedule-{source.pk}-{slot_at:%Y%m%dT%H%MZ}"


def with_schedule(sources: QuerySet) -> QuerySet:
    """Sources with what ``schedule_state`` reads, in the same query: database time, whether the crawl
    pool is paused, the last run."""
    return sources.select_related("last_run").annotate(
        db_now=LeitstandNow(), crawl_paused=Exists(Pool.objects.filter(name="crawl", is_paused=True))
    )


def schedule_state(source: Source) -> ScheduleState:
    """The schedule of a source loaded through ``with_schedule``."""
    run_open = source.last_run is not None and source.last_run.finished_at is None
    return schedule_of(source, now=source.db_now, run_open=run_open, pool_paused=source.crawl_paused)


def schedule_validate(
    *, crawl_every_minutes: int | None, window_start: time | None, window_end: time | None, time_zone: str
) -> None:
    """A schedule's fields checked together; a refusal names its field."""
    if crawl_every_minutes is not None and (
        isinstance(crawl_every_minutes, bool)
        or not isinstance(crawl_every_minutes, int)
        or not 1 <= crawl_every_minutes <= MAX_EVERY_MINUTES
    ):
        raise JobInputError("crawl_every_minutes", f"must be a whole number of minutes from 1 to {MAX_EVERY_MINUTES}")
    if (window_start is None) != (window_end is None):
        raise JobInputError("window_start", "a window needs both its start and its end")
    if window_start is not None and window_start == window_end:
        raise JobInputError("window_end", "must differ from window_start (an empty window never opens)")
    if time_zone:
        try:
            ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file
            raise JobInputError(
                "time_zone", f"unknown time zone {time_zone!r} (an IANA name such as Europe/Berlin)"
            ) from None


def sources_overdue(*, now: datetime | None = None) -> list[tuple[Source, float]]:
    """Active sources not crawled for twice their interval (counted from their creation until a first
    crawl), with the hours since."""
    now = now or database_now()
    overdue = []
    for source in Source.objects.filter(is_active=True):
        since = source.last_crawled_at or source.created_at
        if (now - since) > timedelta(minutes=2 * every_minutes(source)):
            overdue.append((source, (now - since).total_seconds() / 3600))
    return overdue
