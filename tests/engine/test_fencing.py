"""Fencing where it matters: a stale attempt writes while a newer attempt of the same job runs.

Each fenced operation is tried by attempt 1 — whose lease expired and was reaped — while attempt 2
holds the job in the very state attempt 1 still believes it holds. Only the lease version tells
them apart, so each test fails when that guard is removed from its statement: the refusal must be
recorded, and nothing of attempt 2's job, attempt or history may change.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import leases
from jobs.effects import effect_apply_once
from jobs.errors import ErrorKind
from jobs.models import Attempt, Effect, Job, StaleWrite, State, StepEvent, Transition
from jobs.retry import RetryPolicy
from workers.runtime.services import job_submit, jobs_spawn_many

LEASE = 30.0
POLICY = RetryPolicy(base_seconds=1, cap_seconds=10)
NEWER = leases.WorkerIdentity("host-b", 7, "crawl")


def snapshot(job_id):
    """Everything attempt 2 owns: the job row, its attempt, the history."""
    job = Job.objects.values().get(pk=job_id)
    attempt = Attempt.objects.values().get(job_id=job_id, lease_version=2)
    return job, attempt, Transition.objects.filter(job_id=job_id).count(), Effect.objects.count(), Job.objects.count()


@pytest.fixture
def zombie(make_job, worker, db_clock):
    """Attempt 1 lost its lease to the reaper; attempt 2 now holds the job, running unless asked otherwise."""

    def make(*, newer_state=State.RUNNING, type="crawl"):
        job = make_job(type, pool="crawl")
        (stale,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True)
        db_clock.advance(LEASE + 5 + 1)
        assert leases.reap_expired(grace_seconds=5, policy=POLICY)
        db_clock.advance(POLICY.cap_seconds)
        leases.retries_promote_due()
        (newer,) = leases.claim(pool="crawl", worker=NEWER, lease_seconds=LEASE, start=newer_state == State.RUNNING)
        assert (stale.lease_version, newer.lease_version) == (1, 2)
        assert Job.objects.get(pk=job.pk).state == newer_state
        return job, stale, newer

    return make


def assert_refused_and_untouched(job, before, operation):
    assert snapshot(job.pk) == before, "the newer attempt's job, attempt or history changed"
    refusal = StaleWrite.objects.get(job=job, lease_version=1)
    assert (refusal.operation, refusal.current_lease_version) == (operation, 2)
    assert Attempt.objects.get(job=job, lease_version=1).refused_writes == 1


def test_a_stale_start_cannot_start_the_newer_reserved_attempt(zombie):
    job, stale, _ = zombie(newer_state=State.RESERVED)
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        leases.start(stale.id, stale.lease_version, actor="A", processing_version="stale@1")
    assert_refused_and_untouched(job, before, "start")


def test_a_stale_heartbeat_does_not_extend_the_newer_lease(zombie, db_clock):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    db_clock.advance(3)
    with pytest.raises(leases.StaleAttempt):
        leases.heartbeat(stale.id, stale.lease_version, lease_seconds=600)
    assert_refused_and_untouched(job, before, "heartbeat")


def test_a_stale_progress_report_does_not_overwrite_the_newer_progress(zombie):
    job, stale, newer = zombie()
    leases.heartbeat(newer.id, newer.lease_version, lease_seconds=LEASE, progress={"pages": 7})
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        leases.heartbeat(stale.id, stale.lease_version, lease_seconds=LEASE, progress={"pages": 1})
    assert_refused_and_untouched(job, before, "progress")
    assert Job.objects.get(pk=job.pk).progress == {"pages": 7}


def test_stale_step_events_are_not_written(zombie):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        leases.steps_record(
            stale.id, stale.lease_version, [leases.Step("fetch", "ok", timezone.now() - timedelta(seconds=1), 12.0, {})]
        )
    assert_refused_and_untouched(job, before, "step")
    assert not StepEvent.objects.filter(job=job).exists()


def test_a_stale_completion_does_not_end_the_newer_attempt(zombie):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        leases.complete(stale.id, stale.lease_version, actor="A", result_ref="result-of-A")
    assert_refused_and_untouched(job, before, "complete")


def test_a_stale_member_of_a_batch_completion_is_refused_while_the_holder_completes(zombie, make_job, worker):
    job, stale, _ = zombie()
    own = make_job()
    (held,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True)
    assert held.id == own.id
    before = snapshot(job.pk)
    outcomes = leases.complete_many(
        [
            leases.Completion(stale.id, stale.lease_version, "result-of-A"),
            leases.Completion(held.id, held.lease_version, "result-of-held"),
        ],
        actor="A",
    )
    assert isinstance(outcomes[0], leases.StaleAttempt) and outcomes[1].to_state == State.RESULT_STORED
    assert_refused_and_untouched(job, before, "complete")


def test_a_stale_failure_report_does_not_fail_the_newer_attempt(zombie):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        leases.fail(
            stale.id,
            stale.lease_version,
            actor="A",
            kind=ErrorKind.PERMANENT,
            error_class="Boom",
            message="the stale attempt failed",
        )
    assert_refused_and_untouched(job, before, "fail")


def test_a_stale_release_does_not_hand_back_the_newer_attempt(zombie):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        leases.release(stale.id, stale.lease_version, actor="A", reason="SIGTERM")
    assert_refused_and_untouched(job, before, "release")


def test_a_stale_effect_is_not_applied(zombie):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    applied = []
    with pytest.raises(leases.StaleAttempt):
        effect_apply_once(
            key=f"notice:{job.pk}",
            kind="notice",
            apply=lambda: applied.append(1) or {"sent": True},
            job_id=stale.id,
            lease_version=stale.lease_version,
        )
    assert applied == [] and not Effect.objects.filter(key=f"notice:{job.pk}").exists()
    assert_refused_and_untouched(job, before, "effect")


def test_a_stale_spawn_creates_no_child(zombie):
    job, stale, _ = zombie(type="synthetic")
    before = snapshot(job.pk)
    with pytest.raises(leases.StaleAttempt):
        job_submit(
            job_type="synthetic",
            payload={},
            idempotency_key="child-of-the-stale-attempt",
            actor="spawn",
            parent_id=job.pk,
            parent_lease_version=stale.lease_version,
        )
    assert not Job.objects.filter(parent=job).exists()
    assert_refused_and_untouched(job, before, "spawn")


def test_a_stale_bulk_spawn_creates_no_child(zombie):
    job, stale, _ = zombie(type="synthetic")
    before = snapshot(job.pk)
    children = [{"job_type": "synthetic", "payload": {}, "idempotency_key": f"stale-child-{n}"} for n in range(3)]
    with pytest.raises(leases.StaleAttempt):
        jobs_spawn_many(
            children, parent_id=job.pk, parent_lease_version=stale.lease_version, correlation_id=job.correlation_id
        )
    assert not Job.objects.filter(parent=job).exists()
    assert_refused_and_untouched(job, before, "spawn")


def test_the_holder_may_spawn(zombie):
    job, _, newer = zombie(type="synthetic")
    child = job_submit(
        job_type="synthetic",
        payload={},
        idempotency_key="child-of-the-holder",
        actor="spawn",
        parent_id=job.pk,
        parent_lease_version=newer.lease_version,
    ).job
    assert child.parent_id == job.pk


def test_a_dead_workers_rescue_leaves_the_newer_attempt_alone(zombie, worker):
    job, stale, _ = zombie()
    before = snapshot(job.pk)
    assert (
        leases.rescue_from_dead_worker(
            lease_owner=worker.lease_owner, reason="worker died", policy=POLICY, poison_deaths=3
        )
        == []
    )
    assert snapshot(job.pk) == before
