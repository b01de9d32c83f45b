"""The trend-rollups sweep (dashboard/operations/trends_sweep.py): its retention from
``LEITSTAND_ROLLUP_DAYS``, an empty round, and a round that records the last minute once."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard import options as console_options
from dashboard import options as console_settings
from dashboard.models import Rollup
from dashboard.operations import trends_sweep
from dashboard.operations.snapshot import snapshot_refresh
from dashboard.operations.trends_sweep import TrendsConfig
from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_the_retention_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_CONSOLE = {**settings.LEITSTAND_CONSOLE, "rollup_days": 3}
    assert TrendsConfig.from_options(console_options.current()) == replace(
        TrendsConfig.from_options(console_settings.current()), keep_days=3, every_seconds=15
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_ROLLUP_DAYS must be a number of at least 1"):
        replace(TrendsConfig.from_options(console_settings.current()), keep_days=0.5)
    sweep = sweeps.get("trend-rollups")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is trends_sweep.run_once


def test_an_empty_round_records_no_rows():
    assert trends_sweep.run_once(TrendsConfig.from_options(console_settings.current())) == 0


def test_the_last_minute_is_recorded_once_and_old_rows_are_dropped(make_job):
    last_minute = database_now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    done = job_in_state(make_job("crawl", pool="crawl"), State.DONE)
    Job.objects.filter(pk=done.pk).update(finished_at=last_minute + timedelta(seconds=5))
    Rollup.objects.create(minute=last_minute - timedelta(days=4), job_type="crawl")
    snapshot_refresh()
    assert trends_sweep.run_once(replace(TrendsConfig.from_options(console_settings.current()), keep_days=3)) == 1
    assert trends_sweep.run_once(replace(TrendsConfig.from_options(console_settings.current()), keep_days=3)) == 0, (
        "once per minute"
    )
    assert list(Rollup.objects.values_list("minute", "job_type", "done")) == [(last_minute, "crawl", 1)]


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("trend-rollups").function.args == (TrendsConfig.from_options(console_options.current()),)
