"""The supervisor's two decisions, on the real database and without processes: which jobs of dead
workers it hands back (workers/runtime/supervisor/rescue.py) and how it heals a pool that claims
nothing (workers/runtime/supervisor/stalls.py). The sentinel acting on them, with real pools and real
kills, is in tests/processes/test_self_healing.py."""

import os
import time

import pytest

from jobs import leases
from jobs.models import Job, State
from tests.support.clock import Clock
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.supervisor.rescue import Rescuer
from workers.runtime.supervisor.stalls import Heal, StallWatch

HOST = "test-host"
GONE = 4_194_311  # above Linux's largest pid: no process has it
LEASE = 30


@pytest.fixture
def watch(db):
    Pool.objects.update_or_create(name="crawl", defaults={"is_paused": False, "stalled_since": None})
    clock = Clock()
    return StallWatch("crawl", HOST, f"{HOST}:1", stall_seconds=30, wake_after_seconds=5, clock=clock), clock


def test_no_due_work_or_a_paused_pool_is_no_stall(watch, make_job):
    stalls, clock = watch
    clock.now += 300
    assert stalls.check(idle=4) is Heal.NONE, "nothing is due"
    make_job("synthetic", pool="crawl")
    Pool.objects.filter(name="crawl").update(is_paused=True)
    clock.now += 300
    assert stalls.check(idle=4) is Heal.NONE, "paused on purpose"


def test_a_missing_wake_up_costs_one_sweep_interval_and_busy_workers_are_no_stall(watch, make_job):
    stalls, clock = watch
    make_job("synthetic", pool="crawl")
    assert stalls.check(idle=2) is Heal.NONE, "due since just now"
    clock.now += 6
    assert stalls.check(idle=0) is Heal.NONE, "every worker is busy"
    assert stalls.check(idle=2) is Heal.WAKE
    stalls.claimed()
    assert stalls.check(idle=2) is Heal.NONE, "it claimed"


def test_a_stall_is_woken_then_restarted_then_recorded_and_the_next_claim_clears_it(watch, make_job):
    stalls, clock = watch
    make_job("synthetic", pool="crawl")
    stalls.check(idle=3)
    steps = []
    for _ in range(4):
        clock.now += 31
        steps.append(stalls.check(idle=3))
    assert steps == [Heal.WAKE, Heal.RESTART, Heal.WAKE, Heal.WAKE]
    pool = Pool.objects.get(name="crawl")
    assert pool.stalled_since is not None and pool.stalled_on == f"{HOST}:1"
    assert "3 idle workers and no claim for 90 s" in pool.stall_note
    stalls.claimed()
    assert Pool.objects.get(name="crawl").stalled_since is None


def test_a_stall_recorded_by_a_supervisor_that_is_gone_is_cleared_one_that_lives_is_kept(watch):
    stalls, _ = watch
    Pool.objects.filter(name="crawl").update(stalled_on=f"{HOST}:{GONE}", stall_note="old")
    stalls.clear_stale()
    assert Pool.objects.get(name="crawl").stalled_on == ""
    Pool.objects.filter(name="crawl").update(stalled_on=f"{HOST}:{os.getpid()}", stall_note="live")
    stalls.clear_stale()
    assert Pool.objects.get(name="crawl").stalled_on == f"{HOST}:{os.getpid()}"


def _held_by(make_job, pid: int, host: str = HOST, pool: str = "crawl") -> Job:
    job = make_job("synthetic", pool="crawl")
    worker = leases.WorkerIdentity(host=host, pid=pid, pool=pool)
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True, limit=1)
    assert claimed.id == job.pk
    return job


def test_a_dead_workers_jobs_are_handed_back_at_once_and_its_row_says_why(make_job):
    job = _held_by(make_job, GONE)
    WorkerProcess.objects.create(host=HOST, pid=GONE, pool="crawl")
    assert Rescuer("crawl", HOST).rescue(GONE, "worker test-host:4194311 killed by SIGKILL") == 1
    job.refresh_from_db()
    assert job.state == State.PLANNED and job.lease_owner in ("", None)
    row = WorkerProcess.objects.get(host=HOST, pid=GONE, pool="crawl")
    assert row.stopped_at is not None and row.stop_reason.endswith("killed by SIGKILL")
    assert Rescuer("crawl", HOST).rescue(GONE, "again") == 0, "nothing left to hand back"


def test_orphans_are_only_those_of_this_host_and_pool_that_are_gone_and_silent(make_job, db_clock):
    gone = _held_by(make_job, GONE)
    alive = _held_by(make_job, os.getpid())
    mine = _held_by(make_job, GONE - 1)
    other_host = _held_by(make_job, GONE, host=f"{HOST}-2")
    rescuer = Rescuer("crawl", HOST)
    assert rescuer.orphans(live_pids=set()) == 0, "their heartbeats are fresh"
    db_clock.advance(600)
    rescuer.orphans_pace.due = 0.0  # look again at once, however long the first look took (next test)
    assert rescuer.orphans(live_pids={GONE - 1}) == 1
    states = {j.pk: State(Job.objects.get(pk=j.pk).state) for j in (gone, alive, mine, other_host)}
    assert states == {
        gone.pk: State.PLANNED,
        alive.pk: State.RUNNING,
        mine.pk: State.RUNNING,
        other_host.pk: State.RUNNING,
    }


def test_a_long_look_for_orphans_waits_ten_times_as_long_before_the_next(make_job, db_clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    gone = _held_by(make_job, GONE)
    rescuer = Rescuer("crawl", HOST)
    rescuer.orphans_pace.took(0.01)
    assert rescuer.orphans_pace.ready(), "a cheap look runs every round"
    db_clock.advance(600)
    rescuer.orphans_pace.took(0.9)  # as at the end of a 4-minute pin
    assert 8.9 < rescuer.orphans_pace.due - time.monotonic() <= 9.0
    with CaptureQueriesContext(connection) as looked:
        assert rescuer.orphans(live_pids=set()) == 0
    assert not looked.captured_queries, "within its pace nothing is asked"
    rescuer.orphans_pace.due = time.monotonic()
    assert rescuer.orphans(live_pids=set()) == 1 and Job.objects.get(pk=gone.pk).state == State.PLANNED
