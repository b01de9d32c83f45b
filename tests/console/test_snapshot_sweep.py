"""The console-snapshot sweep (dashboard/operations/snapshot_sweep.py): its interval from
``LEITSTAND_CONSOLE_SNAPSHOT_SECONDS``, an empty round, and a round that stores the home page's counts."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard import options as console_options
from dashboard import options as console_settings
from dashboard.models import ConsoleSnapshot
from dashboard.operations import snapshot_sweep
from dashboard.operations.snapshot_sweep import SnapshotConfig
from jobs.models import State
from tests.conftest import job_in_state
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_the_interval_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_CONSOLE = {**settings.LEITSTAND_CONSOLE, "snapshot_seconds": 2}
    assert SnapshotConfig.from_options(console_options.current()) == replace(
        SnapshotConfig.from_options(console_settings.current()), every_seconds=2
    )
    with pytest.raises(
        ImproperlyConfigured, match="LEITSTAND_CONSOLE_SNAPSHOT_SECONDS must be a number of at least 0.5"
    ):
        replace(SnapshotConfig.from_options(console_settings.current()), every_seconds=0)
    sweep = sweeps.get("console-snapshot")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is snapshot_sweep.run_once


def test_an_empty_round_stores_a_snapshot_of_nothing():
    figures = snapshot_sweep.run_once(SnapshotConfig.from_options(console_settings.current()))
    assert figures["pipeline"]["types"] == {} and ConsoleSnapshot.objects.filter(name="home").exists()


def test_a_round_counts_the_jobs_by_type_and_state(make_job):
    make_job("crawl", pool="crawl")
    job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    figures = snapshot_sweep.run_once(SnapshotConfig.from_options(console_settings.current()))
    crawl = figures["pipeline"]["types"]["crawl"]["states"]
    assert (crawl["planned"], crawl["running"]) == (1, 1)
    stored = ConsoleSnapshot.objects.get(name="home").data
    assert stored["pipeline"]["types"]["crawl"]["states"]["running"] == 1


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("console-snapshot").function.args == (SnapshotConfig.from_options(console_options.current()),)
