"""The fault drill with many jobs in flight in one worker process (a real ``runpool``, real
PostgreSQL): killed with ``kill -9`` while twenty jobs run in its threads, the pool hands every one
of them back and runs it again, each business effect applied once; stopped with SIGTERM, it hands
back what it has in hand and leaves nothing leased."""

import pytest

from jobs.models import Attempt, Effect, Job, State, Transition
from tests.support.pools import PoolProcesses, state_of, submit, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

IN_FLIGHT = 20


@pytest.fixture
def pools(django_db_setup, django_db_blocker, tmp_path):
    processes = PoolProcesses(
        str(tmp_path),
        LEITSTAND_SYNTHETIC_WORKERS="1",
        LEITSTAND_SYNTHETIC_IN_FLIGHT=str(IN_FLIGHT),
        # Jobs long enough to be caught in flight (the timing invariants hold: timeout < lease + grace).
        LEITSTAND_SYNTHETIC_TIMEOUT_SECONDS="20",
        LEITSTAND_SYNTHETIC_LEASE_SECONDS="20",
        LEITSTAND_SYNTHETIC_HEARTBEAT_SECONDS="1",
    )
    processes.start("control")
    processes.start("synthetic")
    yield processes
    processes.stop_all()


def all_running(jobs):
    started = Attempt.objects.filter(job__in=jobs, lease_version=1, started_at__isnull=False)
    return started.count() == len(jobs) and started


def test_a_process_dying_with_twenty_jobs_in_flight_loses_none_and_repeats_no_effect(pools):
    """One job's handler kills its process (``os._exit``) right after its effect was recorded, while
    nineteen others run beside it in the same process."""
    others = [submit({"duration_ms": 3000, "effect": True}, pool="synthetic") for _ in range(IN_FLIGHT - 1)]
    crasher = submit(
        {"duration_ms": 1000, "effect": True, "fail": "crash_after_effect", "fail_attempts": 1}, pool="synthetic"
    )
    jobs = [*others, crasher]
    wait_for(
        lambda: all(state_of(job) == State.RESULT_STORED for job in jobs),
        timeout=60,
        message="every job handed back and run again",
    )
    first = Attempt.objects.filter(job__in=jobs, lease_version=1)
    assert {a.outcome for a in first} == {Attempt.Outcome.WORKER_DIED}, "all twenty were in flight when it died"
    assert len({a.worker_pid for a in first}) == 1, "in one worker process"
    for job in jobs:
        assert Transition.objects.filter(job=job, to_state=State.RESULT_STORED).count() == 1
    assert Effect.objects.filter(job__in=jobs).count() == IN_FLIGHT, "each effect once, none lost"
    crasher.refresh_from_db()
    assert crasher.result_ref.endswith(":effect-by-attempt-1"), "the re-run reused the recorded effect"


def test_sigterm_with_jobs_in_flight_leaves_nothing_leased(pools):
    jobs = [submit({"duration_ms": 15_000, "effect": True}, pool="synthetic") for _ in range(IN_FLIGHT)]
    wait_for(lambda: all_running(jobs), timeout=30, message="twenty jobs in flight at once")
    assert pools.terminate("synthetic", timeout=60) == 0
    leased = Job.objects.filter(pk__in=[j.pk for j in jobs], state__in=(State.RESERVED, State.RUNNING))
    assert not leased.exists(), "a stopped pool hands back what it has in hand"
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {State.PLANNED}
