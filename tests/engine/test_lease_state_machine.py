"""A Hypothesis state machine over the lease module on real PostgreSQL.

Random sequences of create / claim / start / heartbeat / complete / fail / release / expire / reap /
retry / cancel and writes by stale attempts, with the engine's invariants checked after every step:
the lease version only rises; a job has at most one live lease, held by its current attempt; no state
changes without its transition row; a refused write changes nothing.
"""

import uuid

import pytest
from django.db.models import Count, Q
from django_fsm import TransitionNotAllowed
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from jobs import insert, leases
from jobs.errors import ErrorKind
from jobs.models import LEASED_STATES, Attempt, Job, StaleWrite, Transition
from jobs.retry import RetryPolicy
from tests.support.db import DatabaseClock

LEASE = 30.0
GRACE = 5.0
POLICY = RetryPolicy(base_seconds=1, cap_seconds=4)
WORKER = leases.WorkerIdentity(host="hyp", pid=1, pool="p")


def complete_in_a_batch(handle):
    (result,) = leases.complete_many([leases.Completion(*handle, result_ref="batch")], actor="w")
    if isinstance(result, Exception):
        raise result


# Every write an attempt can make, keyed by name.
WRITES = {
    "complete_batch": complete_in_a_batch,
    "start": lambda h: leases.start(*h, actor="w"),
    "heartbeat": lambda h: leases.heartbeat(*h, lease_seconds=LEASE, progress={"at": "step"}),
    "complete": lambda h: leases.complete(*h, actor="w", result_ref=f"r{h[1]}"),
    "recheck": lambda h: leases.complete(*h, actor="w", recheck=True),
    "fail_transient": lambda h: leases.fail(
        *h, actor="w", kind=ErrorKind.TRANSIENT, error_class="T", message="m", retry_delay_seconds=POLICY.ceiling(1)
    ),
    "fail_permanent": lambda h: leases.fail(*h, actor="w", kind=ErrorKind.PERMANENT, error_class="P", message="m"),
    "fail_unclear": lambda h: leases.fail(*h, actor="w", kind=ErrorKind.UNCLEAR, error_class="U", message="m"),
    "release": lambda h: leases.release(*h, actor="w", reason="shutdown"),
}


def job_row(job_id):
    return Job.objects.values().get(pk=job_id)


class LeaseMachine(RuleBasedStateMachine):
    clock: DatabaseClock  # shared by all examples of one test, so database time only moves forward

    jobs = Bundle("jobs")

    def __init__(self):
        super().__init__()
        self.type = f"hyp-{uuid.uuid4().hex[:12]}"
        self.handles: list[tuple] = []  # every (job_id, lease_version) ever claimed: current or stale
        self.highest_version: dict = {}

    @rule(target=jobs, max_attempts=st.integers(1, 3), priority=st.integers(0, 9))
    def create(self, max_attempts, priority):
        job = insert.job_insert(
            type=self.type,
            idempotency_key=str(uuid.uuid4()),
            payload={},
            actor="hyp",
            max_attempts=max_attempts,
            priority=priority,
        ).job
        self.highest_version[job.id] = 0
        return job.id

    @rule(limit=st.integers(1, 3), also_start=st.booleans())
    def claim(self, limit, also_start):
        for claimed in leases.claim(pool=self.type, worker=WORKER, lease_seconds=LEASE, limit=limit, start=also_start):
            assert claimed.lease_version > self.highest_version[claimed.id]
            self.handles.append((claimed.id, claimed.lease_version))

    def _superseded(self):
        """Handles whose job has been claimed again since: the zombie attempts."""
        return [(job_id, v) for job_id, v in self.handles if v < self.highest_version[job_id]]

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), write=st.sampled_from(sorted(WRITES)))
    def attempt_writes(self, data, write):
        self._write(data.draw(st.sampled_from(self.handles)), write)

    @precondition(lambda self: self._superseded())
    @rule(data=st.data(), write=st.sampled_from(sorted(WRITES)))
    def zombie_writes(self, data, write):
        self._write(data.draw(st.sampled_from(self._superseded())), write)

    def _write(self, handle, write):
        job_id, version = handle
        before = job_row(job_id)
        refusals_before = StaleWrite.objects.filter(job_id=job_id).count()
        is_current = before["lease_version"] == version and before["state"] in LEASED_STATES
        try:
            WRITES[write](handle)
        except leases.StaleAttempt:
            assert not is_current, "the entitled attempt was refused"
            self._assert_refusal_changed_nothing(job_id, before, refusals_before)
        except TransitionNotAllowed:
            assert is_current, "a stale attempt must be told it is stale"
            self._assert_refusal_changed_nothing(job_id, before, refusals_before)
        else:
            assert is_current, f"a stale attempt's {write} was accepted"

    def _assert_refusal_changed_nothing(self, job_id, before, refusals_before):
        assert job_row(job_id) == before
        assert StaleWrite.objects.filter(job_id=job_id).count() == refusals_before + 1

    @rule()
    def time_passes_beyond_lease_and_grace(self):
        self.clock.advance(LEASE + GRACE + 1)

    @rule()
    def reap(self):
        leases.reap_expired(grace_seconds=GRACE, policy=POLICY)

    @rule()
    def retries_come_due(self):
        self.clock.advance(POLICY.cap_seconds + 1)
        leases.retries_promote_due()
        leases.unclear_queue_for_review()

    @rule(job_id=jobs, name=st.sampled_from(["cancel", "confirm", "retry_now", "decide"]))
    def person_acts(self, job_id, name):
        try:
            leases.transition_apply(job_id, name, actor="person", cause="hypothesis", reason="hypothesis")
        except TransitionNotAllowed:
            pass

    @invariant()
    def lease_versions_only_rise(self):
        for job_id, version in Job.objects.filter(type=self.type).values_list("id", "lease_version"):
            assert version >= self.highest_version[job_id]
            self.highest_version[job_id] = version

    @invariant()
    def at_most_one_live_lease_held_by_the_current_attempt(self):
        jobs = Job.objects.filter(type=self.type).annotate(
            open_attempts=Count("attempt_log", filter=Q(attempt_log__finished_at__isnull=True)),
            attempt_rows=Count("attempt_log"),
        )
        for job in jobs:
            is_leased = job.state in LEASED_STATES
            assert job.open_attempts == (1 if is_leased else 0), (job.state, job.open_attempts)
            assert job.attempt_rows == job.lease_version, "one attempt row per claim"
            if is_leased:
                assert Attempt.objects.get(job=job, finished_at__isnull=True).lease_version == job.lease_version
                assert job.lease_expires_at is not None and job.lease_owner
            else:
                assert job.lease_expires_at is None and job.lease_owner == ""

    @invariant()
    def every_state_change_has_its_transition_row(self):
        chains: dict = {}
        for job_id, from_state, to_state in (
            Transition.objects.filter(job__type=self.type)
            .order_by("id")
            .values_list("job_id", "from_state", "to_state")
        ):
            previous = chains.get(job_id, "")
            assert from_state == previous, f"transition log of {job_id} skips from {previous} to {from_state}"
            chains[job_id] = to_state
        for job_id, state in Job.objects.filter(type=self.type).values_list("id", "state"):
            assert chains[job_id] == state


@pytest.mark.django_db
def test_lease_state_machine():
    LeaseMachine.clock = DatabaseClock()
    try:
        run_state_machine_as_test(
            LeaseMachine,
            settings=settings(
                max_examples=60,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    finally:
        LeaseMachine.clock.reset()
