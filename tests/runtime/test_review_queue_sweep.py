"""The review-queue sweep (workers/runtime/review_queue_sweep.py): its config, an empty round, and a
round that makes unclear jobs review cases — at most ``limit`` of them, and no other job."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.models import Job, State
from tests.conftest import job_in_state
from workers.runtime import review_queue_sweep
from workers.runtime.review_queue_sweep import ReviewQueueConfig
from workers.runtime.sweeps import Stage, sweeps


def test_defaults_and_a_bad_limit():
    assert ReviewQueueConfig() == ReviewQueueConfig(limit=1000, every_seconds=0)
    with pytest.raises(ImproperlyConfigured, match="the review-queue sweep's limit must be a whole number"):
        ReviewQueueConfig(limit=1.5)
    sweep = sweeps.get("review-queue")
    assert sweep.stage == Stage.ENGINE and sweep.function.func is review_queue_sweep.run_once
    assert sweep.function.args == (ReviewQueueConfig(),), "registered with its config"


def test_an_empty_round_queues_nothing(db):
    assert review_queue_sweep.run_once(ReviewQueueConfig()) == 0


def test_unclear_jobs_become_review_cases_at_most_limit_a_round(make_job):
    unclear = [job_in_state(make_job("analysis", pool="analysis"), State.UNCLEAR) for _ in range(2)]
    running = job_in_state(make_job("analysis", pool="analysis"), State.RUNNING)
    assert review_queue_sweep.run_once(ReviewQueueConfig(limit=1)) == 1
    assert review_queue_sweep.run_once(ReviewQueueConfig()) == 1
    assert {Job.objects.get(pk=job.pk).state for job in unclear} == {State.READY_FOR_REVIEW}
    assert Job.objects.get(pk=running.pk).state == State.RUNNING
