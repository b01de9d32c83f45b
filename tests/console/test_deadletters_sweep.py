"""The dead-letters sweep (dashboard/operations/deadletters_sweep.py): its interval from
``LEITSTAND_CONSOLE_DEADLETTERS_SECONDS``, an empty round, and a round that groups the dead jobs and
reopens a reviewed group that has newer dead jobs."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard import options as console_options
from dashboard import options as console_settings
from dashboard.models import DeadLetterReview
from dashboard.operations import deadletters_sweep
from dashboard.operations.deadletters_sweep import DeadLettersConfig
from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_the_interval_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_CONSOLE = {**settings.LEITSTAND_CONSOLE, "deadletters_seconds": 45}
    assert DeadLettersConfig.from_options(console_options.current()) == replace(
        DeadLettersConfig.from_options(console_settings.current()), every_seconds=45
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_CONSOLE_DEADLETTERS_SECONDS must be a number"):
        replace(DeadLettersConfig.from_options(console_settings.current()), every_seconds="30")
    sweep = sweeps.get("dead-letters")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is deadletters_sweep.run_once


def test_an_empty_round_finds_no_group():
    assert deadletters_sweep.run_once(DeadLettersConfig.from_options(console_settings.current())) == {
        "groups": 0,
        "reopened": 0,
    }


def test_dead_jobs_are_grouped_and_a_reviewed_group_with_newer_ones_reopens(make_job):
    now = database_now()
    for error_class in ("httpx.ConnectError", "httpx.ConnectError", "ValueError"):
        job = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
        Job.objects.filter(pk=job.pk).update(error_class=error_class, finished_at=now)
    DeadLetterReview.objects.create(
        type="crawl",
        error_class="ValueError",
        step="",
        decision="watch",
        note="a parser bug",
        reviewed_at=now - timedelta(hours=1),
        reviewed_by="op",
    )
    assert deadletters_sweep.run_once(DeadLettersConfig.from_options(console_settings.current())) == {
        "groups": 2,
        "reopened": 1,
    }
    assert deadletters_sweep.run_once(DeadLettersConfig.from_options(console_settings.current())) == {
        "groups": 2,
        "reopened": 0,
    }, "once"


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("dead-letters").function.args == (DeadLettersConfig.from_options(console_options.current()),)
