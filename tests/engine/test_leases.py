"""The lease module on real PostgreSQL: claims, fenced writes, reaping, refusals, database time."""

from datetime import timedelta

import psycopg
import pytest
import time_machine
from django.db import DatabaseError, connection, transaction
from django_fsm import TransitionNotAllowed

from jobs import leases, services
from jobs.effects import effect_apply_once
from jobs.errors import ErrorKind
from jobs.models import Attempt, Effect, FlowLane, Job, StaleWrite, State, Transition
from jobs.retry import RetryPolicy
from tests.support.db import OWNER
from tests.support.db import test_database_url as database_url

LEASE = 30.0
POLICY = RetryPolicy(base_seconds=1, cap_seconds=10)


def claim_one(worker, type="crawl", lease=LEASE):
    (claimed,) = leases.claim(pool=type, worker=worker, lease_seconds=lease)
    return claimed


def states(job_id):
    return list(Transition.objects.filter(job_id=job_id).order_by("id").values_list("from_state", "to_state"))


def test_happy_path_writes_a_transition_row_for_every_change(make_job, worker):
    job = make_job()
    claimed = claim_one(worker)
    assert (claimed.id, claimed.lease_version, claimed.attempt) == (job.id, 1, 1)
    leases.start(claimed.id, claimed.lease_version, actor=worker.lease_owner, processing_version="crawl@3")
    leases.heartbeat(claimed.id, claimed.lease_version, lease_seconds=LEASE, progress={"done": 3, "total": 10})
    leases.complete(
        claimed.id, claimed.lease_version, actor=worker.lease_owner, result_ref="s3://r/1", result_checksum="abc"
    )

    job.refresh_from_db()
    assert job.state == State.RESULT_STORED
    assert (job.result_ref, job.result_checksum, job.processing_version) == ("s3://r/1", "abc", "crawl@3")
    assert job.progress == {"done": 3, "total": 10}
    assert job.lease_owner == "" and job.lease_expires_at is None
    assert states(job.id) == [
        ("", "planned"),
        ("planned", "reserved"),
        ("reserved", "running"),
        ("running", "result_stored"),
    ]
    attempt = Attempt.objects.get(job=job)
    assert attempt.outcome == Attempt.Outcome.COMPLETED
    assert attempt.claimed_at <= attempt.started_at <= attempt.heartbeat_at <= attempt.finished_at
    assert (attempt.worker_host, attempt.worker_pid, attempt.pool) == ("test-host", 4242, "crawl")


def test_claim_serves_the_urgent_lane_first_then_the_oldest_due(make_job, worker, db_clock):
    bulk_old = make_job(priority=9)
    urgent_new = make_job(priority=0)
    normal_a = make_job(priority=5)
    normal_b = make_job(priority=5)
    later = make_job(priority=0, due_at=db_clock.now() + timedelta(hours=1))

    claimed = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=10)

    assert [c.id for c in claimed] == [urgent_new.id, normal_a.id, normal_b.id, bulk_old.id]
    assert later.id not in {c.id for c in claimed}, "a job is not claimed before it is due"
    assert [c.lease_version for c in claimed] == [1, 1, 1, 1]


def test_a_claim_in_a_backlog_moves_its_lanes_past_the_jobs_it_took_and_says_when_each_was_due(
    make_job, worker, db_clock
):
    older = make_job(due_at=db_clock.now() - timedelta(minutes=2))
    front = make_job(due_at=db_clock.now() - timedelta(minutes=1))
    urgent = make_job(priority=0)
    lane = FlowLane.objects.get(pool="crawl", priority=5, key=older.flow_key)  # crawl jobs are keyed by host
    assert lane.next_due == older.due_at  # the lane's walk starts at its oldest planned job

    claimed = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=2, advance_lanes=True)

    assert [(c.id, c.due_at) for c in claimed] == [(urgent.id, urgent.due_at), (older.id, older.due_at)]
    lane.refresh_from_db()
    assert lane.next_due == front.due_at, "the next claim walks the lane from the job after those it took"
    (walked,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=10)
    assert walked.id == front.id


def test_claim_takes_only_the_requested_types_and_at_most_the_limit(make_job, worker):
    for _ in range(3):
        make_job("crawl")
    analysis = make_job("analysis")
    assert len(leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=2)) == 2
    assert [c.id for c in leases.claim(pool="analysis", worker=worker, lease_seconds=LEASE, limit=5)] == [analysis.id]


def test_claim_rejects_a_nonsensical_request(worker, db):
    with pytest.raises(ValueError, match="limit"):
        leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=0)
    with pytest.raises(ValueError, match="lease_seconds"):
        leases.claim(pool="crawl", worker=worker, lease_seconds=0)


def test_the_zombie_attempt_is_refused_and_recorded_and_the_new_result_stands(make_job, worker, db_clock):
    job = make_job()
    a = claim_one(worker)
    leases.start(a.id, a.lease_version, actor="A")

    # A stops heartbeating; its lease expires, and after the grace period the reaper releases it.
    db_clock.advance(LEASE + 5 + 1)
    assert [r.job_id for r in leases.reap_expired(grace_seconds=5, policy=POLICY)] == [job.id]
    db_clock.advance(POLICY.cap_seconds)
    leases.retries_promote_due()

    b = claim_one(leases.WorkerIdentity("host-b", 7, "crawl"))
    assert b.lease_version == a.lease_version + 1 and b.attempt == 2
    leases.start(b.id, b.lease_version, actor="B")
    leases.complete(b.id, b.lease_version, actor="B", result_ref="result-of-B")

    with pytest.raises(leases.StaleAttempt) as refused_complete:
        leases.complete(a.id, a.lease_version, actor="A", result_ref="result-of-A")
    with pytest.raises(leases.StaleAttempt):
        leases.heartbeat(a.id, a.lease_version, lease_seconds=LEASE)

    assert refused_complete.value.current_lease_version == b.lease_version
    job.refresh_from_db()
    assert (job.state, job.result_ref, job.lease_version) == (State.RESULT_STORED, "result-of-B", b.lease_version)
    attempt_a = Attempt.objects.get(job=job, lease_version=a.lease_version)
    assert attempt_a.outcome == Attempt.Outcome.LEASE_EXPIRED
    assert attempt_a.refused_writes == 2 and attempt_a.last_refused_op == "heartbeat"
    assert list(
        StaleWrite.objects.filter(job=job).values_list("operation", "lease_version", "current_lease_version")
    ) == [("complete", 1, 2), ("heartbeat", 1, 2)]


def test_a_slow_worker_within_the_grace_period_keeps_its_job(make_job, worker, db_clock):
    make_job()
    a = claim_one(worker)
    db_clock.advance(LEASE + 3)  # expired, but inside the 5 s grace period
    assert leases.reap_expired(grace_seconds=5, policy=POLICY) == []
    expires = leases.heartbeat(a.id, a.lease_version, lease_seconds=LEASE)
    assert expires > db_clock.now() + timedelta(seconds=LEASE - 1)
    db_clock.advance(LEASE - 1)
    assert leases.reap_expired(grace_seconds=5, policy=POLICY) == []


def test_heartbeat_extends_the_lease_from_database_time(make_job, worker, db_clock):
    make_job()
    a = claim_one(worker, lease=10)
    db_clock.advance(8)
    expires = leases.heartbeat(a.id, a.lease_version, lease_seconds=10)
    assert abs((expires - db_clock.now()).total_seconds() - 10) < 1


@pytest.mark.parametrize("worker_clock", ["2001-01-01", "2099-12-31"])
def test_lease_decisions_ignore_a_worker_clock_that_is_far_off(make_job, worker, db_clock, worker_clock):
    job = make_job()
    database_now = db_clock.now()
    with time_machine.travel(worker_clock, tick=True):
        a = claim_one(worker, lease=60)
        assert abs((a.lease_expires_at - database_now).total_seconds() - 60) < 5
        # A clock decades ahead must not make the lease look expired, nor one decades behind fresh.
        assert leases.reap_expired(grace_seconds=0, policy=POLICY) == []
        leases.heartbeat(a.id, a.lease_version, lease_seconds=60)
        db_clock.advance(61)
        assert [r.job_id for r in leases.reap_expired(grace_seconds=0, policy=POLICY)] == [job.id]


def test_a_transient_failure_waits_with_backoff_then_goes_dead_when_the_budget_is_spent(make_job, worker, db_clock):
    job = make_job(max_attempts=2)
    for attempt in (1, 2):
        c = claim_one(worker)
        assert c.attempt == attempt
        leases.start(c.id, c.lease_version, actor="w")
        leases.fail(
            c.id,
            c.lease_version,
            actor="w",
            kind=ErrorKind.TRANSIENT,
            error_class="httpx.ReadTimeout",
            message="read timed out",
            retry_delay_seconds=POLICY.delay(attempt),
        )
        job.refresh_from_db()
        if attempt == 1:
            assert job.state == State.FAILED and job.next_attempt_at is not None
            assert leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE) == [], "not before its next attempt"
            db_clock.advance(POLICY.cap_seconds + 1)
            assert [r.to_state for r in leases.retries_promote_due()] == [State.PLANNED]
    assert job.state == State.DEAD
    assert job.completion_reason == "retry budget spent (2 of 2)"
    assert job.finished_at is not None and job.next_attempt_at is None


def test_a_permanent_error_goes_dead_at_once_and_unclear_goes_to_review(make_job, worker):
    dead, unclear = make_job(), make_job()
    for job, kind in ((dead, ErrorKind.PERMANENT), (unclear, ErrorKind.UNCLEAR)):
        c = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE)[0]
        assert c.id == job.id
        leases.start(c.id, c.lease_version, actor="w")
        leases.fail(c.id, c.lease_version, actor="w", kind=kind, error_class="Verdict", message="m")
    dead.refresh_from_db()
    unclear.refresh_from_db()
    assert (dead.state, dead.attempts, dead.completion_reason) == (State.DEAD, 1, "permanent error: Verdict")
    assert unclear.state == State.UNCLEAR
    assert [r.job_id for r in leases.unclear_queue_for_review()] == [unclear.id]
    unclear.refresh_from_db()
    assert unclear.state == State.READY_FOR_REVIEW


def test_release_hands_the_job_back_without_spending_budget(make_job, worker):
    job = make_job(max_attempts=1)
    c = claim_one(worker)
    leases.start(c.id, c.lease_version, actor="w")
    leases.release(c.id, c.lease_version, actor="w", reason="SIGTERM")
    due_at = job.due_at
    job.refresh_from_db()
    assert (job.state, job.attempts) == (State.PLANNED, 0)
    assert job.due_at == due_at, "handed back without a delay, it keeps its place in line"
    assert Attempt.objects.get(job=job).outcome == Attempt.Outcome.RELEASED
    again = claim_one(worker)
    assert (again.lease_version, again.attempt) == (2, 1)


def test_the_reaper_sends_a_job_without_budget_to_dead(make_job, worker, db_clock):
    job = make_job(max_attempts=1)
    claim_one(worker, lease=5)
    db_clock.advance(20)
    (reaped,) = leases.reap_expired(grace_seconds=1, policy=POLICY)
    assert reaped.to_state == State.DEAD
    job.refresh_from_db()
    assert job.completion_reason == "retry budget spent (1 of 1): lease expired"
    assert job.error_class == "LeaseExpired"


def test_reaper_backoff_stays_within_the_policy_bounds(make_job, worker, db_clock):
    for _ in range(20):
        make_job(max_attempts=9)
    leases.claim(pool="crawl", worker=worker, lease_seconds=1, limit=20)
    db_clock.advance(5)
    reaped_at = db_clock.now()
    leases.reap_expired(grace_seconds=0, policy=RetryPolicy(base_seconds=2, cap_seconds=3))
    for next_attempt in Job.objects.values_list("next_attempt_at", flat=True):
        assert timedelta(0) <= next_attempt - reaped_at <= timedelta(seconds=2.5)


def test_cancelling_a_running_job_makes_its_attempt_stale(make_job, worker):
    job = make_job()
    c = claim_one(worker)
    leases.start(c.id, c.lease_version, actor="w")
    from jobs import services

    services.job_cancel(job_id=job.id, actor="operator", reason="customer withdrew the case")
    with pytest.raises(leases.StaleAttempt):
        leases.heartbeat(c.id, c.lease_version, lease_seconds=LEASE)
    job.refresh_from_db()
    assert (job.state, job.completion_reason) == (State.CANCELLED, "customer withdrew the case")
    assert Attempt.objects.get(job=job).outcome == Attempt.Outcome.CANCELLED
    assert states(job.id)[-1] == ("running", "cancelled")


def test_a_current_attempt_asking_for_an_undeclared_transition_is_told_so(make_job, worker):
    make_job()
    c = claim_one(worker)
    with pytest.raises(TransitionNotAllowed, match="complete is not allowed .* while it is reserved"):
        leases.complete(c.id, c.lease_version, actor="w")


def test_writes_to_a_missing_job_say_so(db):
    with pytest.raises(leases.JobNotFound):
        leases.heartbeat("00000000-0000-0000-0000-000000000000", 1, lease_seconds=LEASE)


@pytest.mark.django_db(transaction=True)
def test_the_transition_log_refuses_update_and_delete(make_job):
    """The application role has no such privilege (tests/config/test_db_roles.py); the trigger refuses even
    the owner, who has (over a connection of its own)."""
    job = make_job()
    row = Transition.objects.get(job=job)
    for statement in (
        "UPDATE jobs_transition SET cause = 'rewritten' WHERE id = %s",
        "DELETE FROM jobs_transition WHERE id = %s",
    ):
        with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement, [row.id])
        with psycopg.connect(database_url(user=OWNER)) as owner:
            with pytest.raises(psycopg.Error, match="append-only"):
                owner.execute(statement, [row.id])
    assert Transition.objects.get(pk=row.pk).cause == "created"


def _job_table_update_counts():
    with connection.cursor() as cursor:
        # Make this backend publish its pending statistics, then read them afresh.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT pg_stat_get_tuples_hot_updated('jobs_job'::regclass), "
            "pg_stat_get_tuples_updated('jobs_job'::regclass)"
        )
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_heartbeats_are_hot_updates(make_job, worker):
    """Columns that heartbeats write are not indexed, so PostgreSQL updates the row in place (HOT)."""
    make_job()
    c = claim_one(worker)
    hot_before, updated_before = _job_table_update_counts()
    for _ in range(50):  # each in its own transaction, as workers send them
        leases.heartbeat(c.id, c.lease_version, lease_seconds=LEASE, progress={"n": 1})
    hot_after, updated_after = _job_table_update_counts()
    assert updated_after - updated_before == 50
    assert hot_after - hot_before == 50


def test_an_effect_is_applied_once_per_key_and_only_by_the_lease_holder(make_job, worker, db_clock):
    make_job()
    c = claim_one(worker)
    applied = []
    first = effect_apply_once(
        key="finding:1",
        kind="finding",
        job_id=c.id,
        lease_version=c.lease_version,
        apply=lambda: applied.append(1) or "created",
    )
    second = effect_apply_once(
        key="finding:1", kind="finding", job_id=c.id, lease_version=c.lease_version, apply=lambda: applied.append(2)
    )
    assert (first.applied, first.value, second.applied, applied) == (True, "created", False, [1])

    db_clock.advance(LEASE + 1)
    leases.reap_expired(grace_seconds=0, policy=POLICY)
    with pytest.raises(leases.StaleAttempt):
        effect_apply_once(
            key="finding:2", kind="finding", job_id=c.id, lease_version=c.lease_version, apply=lambda: applied.append(3)
        )
    assert applied == [1]
    assert not Effect.objects.filter(key="finding:2").exists()
    assert StaleWrite.objects.get().operation == "effect"


@pytest.mark.django_db(transaction=True)
def test_an_attempts_effect_commits_without_waiting_for_the_disk_others_do(make_job, worker):
    """An attempt's effect on its own commits relaxed: the attempt's durable end flushes it (jobs/effects.py).
    An effect of no attempt, or inside a caller's transaction, leaves the commit to its usual setting."""
    make_job()
    claimed = claim_one(worker)
    seen = {}

    def note(name):
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            seen[name] = cursor.fetchone()[0]

    fenced = {"job_id": claimed.id, "lease_version": claimed.lease_version}
    effect_apply_once(key="finding:1", kind="finding", apply=lambda: note("attempt"), **fenced)
    effect_apply_once(key="notice:1", kind="notice", apply=lambda: note("no attempt"))
    with transaction.atomic():
        effect_apply_once(key="finding:2", kind="finding", apply=lambda: note("in a transaction"), **fenced)
    note("after")
    assert seen == {"attempt": "off", "no attempt": "on", "in a transaction": "on", "after": "on"}
    assert Effect.objects.count() == 3


def test_an_effect_that_raises_is_not_recorded(db):
    def explode():
        raise RuntimeError("mail server down")

    with pytest.raises(RuntimeError):
        effect_apply_once(key="notice:1", kind="notice", apply=explode)
    assert not Effect.objects.exists()
    assert effect_apply_once(key="notice:1", kind="notice", apply=lambda: "sent").applied


def test_claim_can_start_at_once_with_a_lease_and_version_per_type(make_job, worker, db_clock):
    quick = make_job("quick", pool="mixed")
    slow = make_job("slow", pool="mixed")
    claimed = leases.claim(
        pool="mixed",
        worker=worker,
        lease_seconds={"quick": 10, "slow": 100},
        limit=5,
        start=True,
        processing_versions={"quick": "quick@2"},
    )
    now = db_clock.now()
    leases_left = {c.type: (c.lease_expires_at - now).total_seconds() for c in claimed}
    assert 8 < leases_left["quick"] <= 10 and 98 < leases_left["slow"] <= 100
    for job in (quick, slow):
        job.refresh_from_db()
        assert job.state == State.RUNNING
        assert states(job.id)[1:] == [("planned", "reserved"), ("reserved", "running")]
        assert Attempt.objects.get(job=job).started_at is not None
    assert (quick.processing_version, slow.processing_version) == ("quick@2", "")


def test_claim_serves_only_its_pool(make_job, worker):
    make_job("crawl", pool="crawl")
    assert leases.claim(pool="analysis", worker=worker, lease_seconds=LEASE) == []


def test_complete_many_completes_the_holders_and_records_each_stale_one(make_job, worker, db_clock):
    for _ in range(3):
        make_job()
    a, b, c = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=3, start=True)
    leases.release(c.id, c.lease_version, actor="w", reason="handed back")
    results = leases.complete_many(
        [
            leases.Completion(a.id, a.lease_version, result_ref="ra", result_checksum="ca"),
            leases.Completion(b.id, b.lease_version, result_ref="rb", recheck=True),
            leases.Completion(c.id, c.lease_version, result_ref="rc"),
        ],
        actor="w",
    )
    assert [r.to_state for r in results[:2]] == [State.RESULT_STORED, State.RECHECK_DUE]
    assert isinstance(results[2], leases.StaleAttempt) and results[2].current_state == State.PLANNED
    assert Job.objects.get(pk=a.id).result_ref == "ra" and Job.objects.get(pk=c.id).result_ref == ""
    assert Attempt.objects.get(job_id=c.id).refused_writes == 1
    assert StaleWrite.objects.get().job_id == c.id
    assert states(b.id)[-1] == ("running", "recheck_due")
    with pytest.raises(ValueError, match="more than once"):
        leases.complete_many([leases.Completion(a.id, 1), leases.Completion(a.id, 1)], actor="w")


def test_a_settled_completion_logs_the_stored_result_and_the_decision(make_job, worker):
    make_job()
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True)
    (result,) = leases.complete_many(
        [
            leases.Completion(
                claimed.id, claimed.lease_version, result_ref="finding:9", settled="no match: best score 0.41"
            )
        ],
        actor="w",
    )
    assert (result.from_state, result.to_state) == (State.RUNNING, State.DONE)
    job = Job.objects.get(pk=claimed.id)
    assert (job.result_ref, job.completion_reason, job.lease_owner) == ("finding:9", "no match: best score 0.41", "")
    assert job.finished_at is not None
    assert states(claimed.id)[-2:] == [("running", "result_stored"), ("result_stored", "done")]
    assert (
        list(Transition.objects.filter(job_id=claimed.id).order_by("id").values_list("cause", flat=True))[-1]
        == "no match: best score 0.41"
    )
    with pytest.raises(ValueError, match="both plan a recheck and settle"):
        leases.complete_many([leases.Completion(claimed.id, 1, recheck=True, settled="x")], actor="w")


def test_a_repeated_effect_returns_what_the_first_run_recorded(db):
    first = effect_apply_once(key="finding:7", kind="finding", apply=lambda: {"finding_id": 7, "score": 0.93})
    again = effect_apply_once(key="finding:7", kind="finding", apply=lambda: {"finding_id": 8})
    assert (first.applied, again.applied) == (True, False)
    assert again.value == {"finding_id": 7, "score": 0.93}


def test_step_events_are_fenced_by_the_lease(make_job, worker, db_clock):
    from django.utils import timezone

    from jobs.models import StepEvent

    job = make_job(correlation_id="case-1")
    c = claim_one(worker)
    step = leases.Step(step="fetch", outcome="ok", started_at=timezone.now(), duration_ms=12.5, data={"status": 200})
    leases.steps_record(c.id, c.lease_version, [step])
    db_clock.advance(LEASE + 1)
    leases.reap_expired(grace_seconds=0, policy=POLICY)
    with pytest.raises(leases.StaleAttempt):
        leases.steps_record(c.id, c.lease_version, [step])
    recorded = StepEvent.objects.get(job=job)
    assert (recorded.step, recorded.correlation_id, recorded.data, recorded.lease_version) == (
        "fetch",
        "case-1",
        {"status": 200},
        1,
    )
    assert StaleWrite.objects.get(job=job).operation == "step"


def test_retry_now_gives_a_dead_job_a_fresh_retry_budget(make_job, worker):
    job = make_job(max_attempts=2)
    for _ in range(2):
        (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True)
        leases.fail(
            claimed.id,
            claimed.lease_version,
            actor="w",
            kind=ErrorKind.TRANSIENT,
            error_class="Flaky",
            message="again",
            retry_delay_seconds=0,
        )
        leases.retries_promote_due()
    job.refresh_from_db()
    assert (job.state, job.attempts) == (State.DEAD, 2)

    services.job_retry_now(job_id=job.pk, actor="operator", reason="the upstream site is back")
    job.refresh_from_db()
    assert (job.state, job.attempts) == (State.PLANNED, 0), "a fresh budget, not the spent one"
    (again,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True)
    assert again.attempt == 1
    leases.fail(again.id, again.lease_version, actor="w", kind=ErrorKind.TRANSIENT, error_class="Flaky", message="m")
    assert Job.objects.get(pk=job.pk).state == State.FAILED, "the retry budget allows another attempt"


def test_a_deferred_release_is_due_after_its_delay(make_job, worker, db_clock):
    job = make_job()
    c = claim_one(worker)
    leases.release(c.id, c.lease_version, actor="w", reason="deferred: host busy", delay_seconds=30)
    job.refresh_from_db()
    assert job.due_at > db_clock.now() + timedelta(seconds=29)


def test_a_dead_workers_jobs_come_back_at_once_then_back_off_then_die_as_suspected_poison(make_job, db_clock):
    job = make_job(max_attempts=10)
    other = make_job(priority=9)
    due_at = job.due_at
    deaths = []
    for pid in (101, 102, 103):
        db_clock.advance(POLICY.cap_seconds)  # past any backoff
        leases.retries_promote_due()
        dying = leases.WorkerIdentity("host-a", pid, "crawl")
        (claimed,) = leases.claim(pool="crawl", worker=dying, lease_seconds=LEASE, start=True)
        assert claimed.id == job.id
        deaths.append(
            leases.rescue_from_dead_worker(
                lease_owner=dying.lease_owner, reason=f"worker {pid} died", policy=POLICY, poison_deaths=3
            )
        )
        job.refresh_from_db()
        if pid == 101:
            assert (job.state, job.attempts, job.due_at) == (State.PLANNED, 1, due_at), (
                "due again at once, in its place"
            )
        elif pid == 102:
            assert (job.state, job.attempts) == (State.FAILED, 2) and job.next_attempt_at is not None
    assert [[r.to_state for r in rescued] for rescued in deaths] == [[State.PLANNED], [State.FAILED], [State.DEAD]]
    assert (job.state, job.error_class) == (State.DEAD, "WorkerDied")
    assert job.completion_reason == "suspected poison job: its worker died in 3 attempts"
    assert (
        list(Attempt.objects.filter(job=job).values_list("outcome", flat=True).order_by("lease_version"))
        == [Attempt.Outcome.WORKER_DIED] * 3
    )
    assert Job.objects.get(pk=other.pk).state == State.PLANNED, "other owners' jobs are left alone"


def test_a_dead_workers_job_without_budget_left_goes_dead(make_job, worker):
    job = make_job(max_attempts=1)
    claim_one(worker)
    (rescued,) = leases.rescue_from_dead_worker(
        lease_owner=worker.lease_owner, reason="worker died", policy=POLICY, poison_deaths=3
    )
    job.refresh_from_db()
    assert (rescued.to_state, job.completion_reason) == (State.DEAD, "retry budget spent (1 of 1): worker died")


def test_a_dead_workers_batch_mates_that_waited_their_turn_are_released_not_blamed(make_job, worker):
    ran, waited = make_job(), make_job()
    claimed = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=2, start=True)
    assert [c.id for c in claimed] == [ran.id, waited.id]
    leases.rescue_from_dead_worker(
        lease_owner=worker.lease_owner, reason="worker died", policy=POLICY, poison_deaths=3, running=ran.id
    )
    ran.refresh_from_db()
    waited.refresh_from_db()
    assert (ran.state, ran.attempts, ran.error_class) == (State.PLANNED, 1, "WorkerDied")
    assert (waited.state, waited.attempts, waited.error_class) == (State.PLANNED, 0, "")
    assert Attempt.objects.get(job=ran).outcome == Attempt.Outcome.WORKER_DIED
    waited_attempt = Attempt.objects.get(job=waited)
    assert waited_attempt.outcome == Attempt.Outcome.RELEASED
    assert waited_attempt.error_message == "its worker died while it waited its turn: worker died"


def test_when_no_handler_ran_a_job_with_earlier_deaths_is_released_not_blamed(make_job, db_clock):
    job = make_job(max_attempts=10)
    first = leases.WorkerIdentity("host-a", 201, "crawl")
    leases.claim(pool="crawl", worker=first, lease_seconds=LEASE, start=True)
    leases.rescue_from_dead_worker(lease_owner=first.lease_owner, reason="died", policy=POLICY, poison_deaths=3)
    second = leases.WorkerIdentity("host-a", 202, "crawl")
    (claimed,) = leases.claim(pool="crawl", worker=second, lease_seconds=LEASE, start=True)
    assert claimed.id == job.id
    (rescued,) = leases.rescue_from_dead_worker(
        lease_owner=second.lease_owner, reason="died between jobs", policy=POLICY, poison_deaths=3, running=None
    )
    job.refresh_from_db()
    assert (rescued.to_state, job.state, job.attempts) == (State.PLANNED, State.PLANNED, 1)
    assert Attempt.objects.get(job=job, lease_version=claimed.lease_version).outcome == Attempt.Outcome.RELEASED


@pytest.mark.parametrize("ending", ["failed", "lease expired", "worker died twice"])
def test_a_job_back_from_its_backoff_keeps_its_place_in_line(make_job, worker, db_clock, ending):
    """Issue 39: a job whose attempt failed, whose worker froze or died, waits out its backoff (its
    earliest start) and then starts before every job that was due after it — not behind a backlog
    submitted while it backed off."""
    victim = make_job(due_at=db_clock.now() - timedelta(minutes=5), max_attempts=5)
    if ending == "worker died twice":  # the first death hands it back at once; the second backs off
        for pid in (301, 302):
            dying = leases.WorkerIdentity("host-x", pid, "crawl")
            assert claim_one(dying).id == victim.id
            leases.rescue_from_dead_worker(
                lease_owner=dying.lease_owner, reason="killed", policy=POLICY, poison_deaths=5
            )
    else:
        claimed = claim_one(worker)
        assert claimed.id == victim.id
        if ending == "failed":
            leases.fail(
                claimed.id,
                claimed.lease_version,
                actor="w",
                kind=ErrorKind.TRANSIENT,
                error_class="Flaky",
                message="503",
                retry_delay_seconds=POLICY.cap_seconds,
            )
        else:
            db_clock.advance(LEASE + 5 + 1)
            assert [r.job_id for r in leases.reap_expired(grace_seconds=5, policy=POLICY)] == [victim.id]
    assert Job.objects.get(pk=victim.pk).state == State.FAILED
    backlog = [make_job() for _ in range(3)]  # submitted while it backs off, due now

    leases.retries_promote_due()
    first = claim_one(worker)
    assert first.id == backlog[0].id, "its backoff is its earliest start: not claimed before it ends"
    leases.release(first.id, first.lease_version, actor="w", reason="test")

    db_clock.advance(POLICY.cap_seconds + 1)
    assert [r.job_id for r in leases.retries_promote_due()] == [victim.id]
    again = claim_one(worker)
    assert again.id == victim.id, "back from its backoff, it is first in line again"
    assert again.due_at == victim.due_at
