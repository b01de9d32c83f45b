"""The crawl-schedules sweep (workers/pipeline/schedule_sweep.py): its config, an empty round, and the
runs it starts — each slot once, the most urgent source first, never beside an unfinished run."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.models import Batch, Job, LeitstandNow
from workers.pipeline import options as pipeline_options
from workers.pipeline import options as pipeline_settings
from workers.pipeline.models import Source
from workers.pipeline.schedule_sweep import ScheduleSweepConfig, run_once
from workers.pipeline.schedules import run_name
from workers.pipeline.services import crawl_start, source_upsert
from workers.runtime.models import Pool

CONFIG = ScheduleSweepConfig.from_options(pipeline_settings.current())


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_config_comes_from_the_settings_and_a_bad_value_names_its_setting(settings):
    settings.LEITSTAND_CRAWL_SCHEDULE_SECONDS, settings.LEITSTAND_CRAWL_SCHEDULE_STARTS = 30, 5
    assert ScheduleSweepConfig.from_options(pipeline_options.current()) == replace(
        ScheduleSweepConfig.from_options(pipeline_settings.current()), every_seconds=30, starts_per_round=5
    )
    assert (CONFIG.every_seconds, CONFIG.starts_per_round) == (15, 100)
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_CRAWL_SCHEDULE_STARTS must be a whole number"):
        replace(ScheduleSweepConfig.from_options(pipeline_settings.current()), starts_per_round=0)
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_CRAWL_SCHEDULE_SECONDS must be at least 1"):
        replace(ScheduleSweepConfig.from_options(pipeline_settings.current()), every_seconds=0.1)


def test_an_empty_round_starts_nothing(db):
    assert run_once(CONFIG) == 0 and not Job.objects.exists()


def test_the_sweep_starts_each_slot_once_most_urgent_first(db, db_clock):
    low = source_upsert(name="low", base_url="http://127.0.0.1:9/low", priority=7, crawl_every_minutes=60)
    high = source_upsert(name="high", base_url="http://127.0.0.1:9/high", priority=1, crawl_every_minutes=60)
    assert run_once(replace(ScheduleSweepConfig.from_options(pipeline_settings.current()), starts_per_round=1)) == 1
    assert Job.objects.get().source == "high", "the more urgent source is planned first"
    assert run_once(CONFIG) == 1 and run_once(CONFIG) == 0
    low.refresh_from_db()
    high.refresh_from_db()
    assert low.last_run.key == f"crawl-run:{run_name(low, low.last_slot_at)}"
    assert Job.objects.filter(type="crawl").count() == 2 and Batch.objects.count() == 2

    # The next slot: the previous runs have not finished, so nothing starts until they have.
    db_clock.advance(3600)
    assert run_once(CONFIG) == 0
    Batch.objects.update(finished_at=at("2026-12-01T00:00"))
    assert run_once(CONFIG) == 2
    assert Batch.objects.count() == 4


def test_a_slot_started_twice_makes_one_run(db):
    """Two control processes (or one restarted before it recorded the slot) start the same slot."""
    source = source_upsert(name="s", base_url="http://127.0.0.1:9/", crawl_every_minutes=60)
    assert run_once(CONFIG) == 1
    Source.objects.filter(pk=source.pk).update(last_slot_at=None, last_run=None)  # as if never recorded
    assert run_once(CONFIG) == 1
    assert Batch.objects.count() == 1 and Job.objects.count() == 1


def test_pausing_the_source_or_the_pool_pauses_the_schedule(db):
    source = source_upsert(name="s", base_url="http://127.0.0.1:9/", crawl_every_minutes=60, is_active=False)
    assert run_once(CONFIG) == 0
    Source.objects.filter(pk=source.pk).update(is_active=True)
    Pool.objects.filter(name="crawl").update(is_paused=True)
    assert run_once(CONFIG) == 0
    Pool.objects.filter(name="crawl").update(is_paused=False)
    assert run_once(CONFIG) == 1


def test_a_run_by_hand_takes_the_current_slot(db, db_clock):
    source = source_upsert(name="s", base_url="http://127.0.0.1:9/", crawl_every_minutes=60)
    crawl_start(actor="operator", sources=[source], run="by-hand")
    Batch.objects.update(finished_at=LeitstandNow())
    assert run_once(CONFIG) == 0, "the slot's run was started by hand"
    db_clock.advance(3600)
    assert run_once(CONFIG) == 1
