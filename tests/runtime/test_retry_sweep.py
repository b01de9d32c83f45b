"""The retries sweep (workers/runtime/retry_sweep.py): its config, an empty round, and a round that
plans the failed jobs whose next attempt has come — no other, at most ``limit`` of them."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from workers.runtime import retry_sweep
from workers.runtime.retry_sweep import RetryConfig
from workers.runtime.sweeps import Stage, sweeps


def failed(make_job, seconds_until_retry: float) -> Job:
    job = job_in_state(make_job("synthetic", pool="crawl", payload={}), State.FAILED)
    Job.objects.filter(pk=job.pk).update(next_attempt_at=database_now() + timedelta(seconds=seconds_until_retry))
    return job


def test_defaults_and_a_bad_limit():
    assert RetryConfig() == RetryConfig(limit=1000, every_seconds=0)
    with pytest.raises(ImproperlyConfigured, match="the retries sweep's limit must be a whole number of at least 1"):
        RetryConfig(limit=0)
    sweep = sweeps.get("retries")
    assert sweep.stage == Stage.ENGINE and sweep.function.func is retry_sweep.run_once
    assert sweep.function.args == (RetryConfig(),), "registered with its config"


def test_an_empty_round_plans_nothing(db):
    assert retry_sweep.run_once(RetryConfig()) == 0


def test_due_retries_are_planned_at_most_limit_a_round(make_job):
    due = [failed(make_job, -5), failed(make_job, -1)]
    later = failed(make_job, 60)
    assert retry_sweep.run_once(RetryConfig(limit=1)) == 1
    assert retry_sweep.run_once(RetryConfig(limit=1)) == 1
    assert retry_sweep.run_once(RetryConfig()) == 0
    assert {Job.objects.get(pk=job.pk).state for job in due} == {State.PLANNED}
    assert Job.objects.get(pk=later.pk).state == State.FAILED, "its retry has not come"
