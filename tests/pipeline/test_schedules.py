"""Crawl schedules: slots in local time, windows, missed slots collapsing into one run, a previous run
that has not finished, pauses (the sweep that starts the runs: test_schedule_sweep.py)."""

from datetime import UTC, datetime, time

import pytest

from jobs.models import LeitstandNow
from jobs.services import JobInputError
from workers.pipeline.models import Source
from workers.pipeline.schedules import schedule_of, sources_overdue
from workers.pipeline.services import source_schedule_set, source_upsert

BERLIN = "Europe/Berlin"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def state(source: Source, now: str, *, run_open: bool = False, pool_paused: bool = False):
    return schedule_of(source, now=at(now), run_open=run_open, pool_paused=pool_paused)


def test_a_daily_slot_starts_at_local_midnight_and_is_due_once():
    source = Source(name="s", base_url="http://x/", crawl_every_minutes=1440, time_zone=BERLIN)
    due = state(source, "2026-12-01T10:00")
    assert (due.due, due.slot_at, due.waiting) == (True, at("2026-11-30T23:00"), "")
    source.last_slot_at = due.slot_at
    taken = state(source, "2026-12-01T10:00")
    assert not taken.due and taken.next_at == at("2026-12-01T23:00")
    assert taken.waiting == "this slot's run started; next slot at 2026-12-02 00:00"


def test_missed_slots_collapse_into_the_current_one():
    source = Source(name="s", base_url="http://x/", crawl_every_minutes=360, time_zone="UTC")
    source.last_slot_at = at("2026-11-29T06:00")  # nine slots ago
    due = state(source, "2026-12-01T13:59")
    assert due.due and due.slot_at == at("2026-12-01T12:00")
    source.last_slot_at = due.slot_at
    assert not state(source, "2026-12-01T17:59").due
    assert state(source, "2026-12-01T18:00").due


def test_a_window_holds_the_run_until_it_opens():
    source = Source(
        name="s",
        base_url="http://x/",
        crawl_every_minutes=1440,
        time_zone=BERLIN,
        window_start=time(2),
        window_end=time(4),
    )
    waiting = state(source, "2026-12-01T10:00")  # 11:00 in Berlin
    assert (waiting.due, waiting.waiting) == (False, "window opens at 02:00")
    assert waiting.next_at == at("2026-12-02T01:00")
    assert state(source, "2026-12-02T01:30").due  # 02:30 in Berlin, a new day's slot


def test_a_window_may_pass_midnight():
    source = Source(
        name="s",
        base_url="http://x/",
        crawl_every_minutes=60,
        time_zone="UTC",
        window_start=time(22),
        window_end=time(4),
    )
    assert state(source, "2026-12-01T23:30").due
    assert state(source, "2026-12-02T03:10").due
    assert not state(source, "2026-12-02T04:00").due


def test_what_a_source_waits_for():
    source = Source(name="s", base_url="http://x/", crawl_every_minutes=60, time_zone="UTC")
    assert state(source, "2026-12-01T10:00", run_open=True).waiting == "previous run still running"
    assert state(source, "2026-12-01T10:00", pool_paused=True).waiting == "crawl pool paused"
    source.is_active = False
    paused = state(source, "2026-12-01T10:00")
    assert (paused.due, paused.waiting, paused.next_at) == (False, "source paused (inactive)", None)


def test_the_default_interval_comes_from_the_settings(settings):
    settings.LEITSTAND_CRAWL_EVERY_MINUTES = 10080  # weekly: slots start on Mondays
    settings.TIME_ZONE = "UTC"
    due = state(Source(name="s", base_url="http://x/"), "2026-12-03T10:00")  # a Thursday
    assert due.every_minutes == 10080 and due.slot_at == at("2026-11-30T00:00")


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"crawl_every_minutes": 0}, "crawl_every_minutes"),
        ({"crawl_every_minutes": 50000}, "crawl_every_minutes"),
        ({"crawl_every_minutes": True}, "crawl_every_minutes"),
        ({"crawl_every_minutes": 60, "window_start": time(2)}, "window_start"),
        ({"crawl_every_minutes": 60, "window_start": time(2), "window_end": time(2)}, "window_end"),
        ({"crawl_every_minutes": 60, "time_zone": "Mars/Olympus"}, "time_zone"),
        ({"crawl_every_minutes": 60, "time_zone": "../../etc/passwd"}, "time_zone"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_field_and_changes_nothing(db, fields, field):
    source = source_upsert(name="s", base_url="http://127.0.0.1:9/", crawl_every_minutes=30)
    with pytest.raises(JobInputError) as refused:
        source_schedule_set(source_id=source.pk, actor="t", **fields)
    assert refused.value.field == field
    assert Source.objects.get(pk=source.pk).crawl_every_minutes == 30


def test_a_source_not_crawled_for_twice_its_interval_is_overdue(db, db_clock):
    source = source_upsert(name="s", base_url="http://127.0.0.1:9/", crawl_every_minutes=60)
    assert sources_overdue() == []
    db_clock.advance(2 * 3600 + 60)
    ((overdue, hours),) = sources_overdue()
    assert overdue == source and hours > 2
    Source.objects.filter(pk=source.pk).update(last_crawled_at=LeitstandNow())
    assert sources_overdue() == []
