"""The job page's "why it is where it is" sentence, for each situation, from constructed data."""

from datetime import timedelta

import pytest

from dashboard.explain import job_explain
from jobs import leases
from jobs.errors import ErrorKind
from jobs.models import Job, ReviewLease, State
from tests.conftest import job_in_state
from workers.runtime.models import WorkerProcess
from workers.runtime.services import job_submit, pool_pause

pytestmark = pytest.mark.django_db


def submit(key, **fields):
    return job_submit(job_type="synthetic", payload={"pool": "crawl"}, idempotency_key=key, actor="t", **fields).job


def explain(job, db_clock):
    return job_explain(Job.objects.get(pk=job.pk), now=db_clock.now())


def live_worker(pool="crawl"):
    return WorkerProcess.objects.create(host="host-a", pid=4312, pool=pool)


def test_waiting_for_a_worker_counts_the_jobs_ahead(db_clock):
    live_worker()
    ahead = [submit(f"a{n}", priority=3) for n in range(3)]
    job = submit("me", priority=5)
    submit("behind", priority=7)
    assert ahead and explain(job, db_clock) == "waiting for a crawl worker: 3 ahead of it (priority 5)"


def test_a_paused_pool_and_a_pool_without_workers_say_so(db_clock):
    job = submit("p")
    gone = live_worker()
    WorkerProcess.objects.filter(pk=gone.pk).update(
        last_seen_at=db_clock.now() - timedelta(minutes=5), stop_reason="SIGTERM"
    )
    assert explain(job, db_clock).startswith("no live worker in pool crawl; last worker host-a:4312 seen at ")
    assert explain(job, db_clock).endswith("(SIGTERM)")
    live_worker()
    pool_pause(pool="crawl", actor="user:op", reason="deploy")
    assert explain(job, db_clock).startswith("pool crawl is paused (by user:op at ")
    assert "deploy); nothing is claimed until it is resumed" in explain(job, db_clock)


def test_a_retry_a_lease_and_an_expired_lease(db_clock, worker):
    job = submit("r")
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=30, start=True)
    leases.heartbeat(claimed.id, claimed.lease_version, lease_seconds=30)
    db_clock.advance(3)
    assert explain(job, db_clock).startswith("lease held by test-host:4242/crawl, last heartbeat 3 s ago, lease until ")
    db_clock.advance(40)
    assert explain(job, db_clock).startswith(
        "lease of test-host:4242/crawl expired 13 s ago; the reaper releases it 10 s"
    )
    leases.fail(
        claimed.id,
        claimed.lease_version,
        actor="w",
        kind=ErrorKind.TRANSIENT,
        error_class="httpx.ReadTimeout",
        message="read timed out",
        retry_delay_seconds=60,
    )
    sentence = explain(job, db_clock)
    assert sentence.startswith("retry 2 of 5 at ") and sentence.endswith(" after ReadTimeout")


def test_review_recheck_stored_and_ended_cases(make_job, db_clock):
    review = job_in_state(make_job(), State.READY_FOR_REVIEW)
    assert explain(review, db_clock).startswith("waiting for review since ")
    ReviewLease.objects.create(job=review, reviewer="user:rev", expires_at=db_clock.now() + timedelta(minutes=5))
    assert ", opened by user:rev until " in explain(review, db_clock)
    stored = job_in_state(make_job(), State.RESULT_STORED)
    assert "waiting for an operator to confirm the business outcome" in explain(stored, db_clock)
    assert explain(job_in_state(make_job(), State.RECHECK_DUE), db_clock) == "executed; waiting for its recheck plan"
    dead = job_in_state(make_job(), State.DEAD)
    Job.objects.filter(pk=dead.pk).update(error_class="workers.pipeline.fetching.PageGone", error_message="gone")
    assert explain(dead, db_clock).startswith("in the dead-letter queue since ")
    assert explain(dead, db_clock).endswith("after workers.pipeline.fetching.PageGone: gone; an operator may retry it")


def test_a_deferred_job_says_when_and_why(db_clock, worker):
    job = submit("d")
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=30, start=True)
    leases.release(
        claimed.id, claimed.lease_version, actor="w", reason="deferred: a.example:443: busy", delay_seconds=90
    )
    sentence = explain(job, db_clock)
    assert (
        sentence.startswith("not due yet: due at ") and "in 90 s (released: deferred: a.example:443: busy)" in sentence
    )
