"""Real `runpool` processes on real PostgreSQL: crashes, stalls, lost connections, poison jobs,
priority under a flood, and graceful shutdown."""

import os
import signal
import threading
import time

import psycopg
import pytest
from django.db import connection, transaction

from jobs.models import Attempt, Effect, Job, StaleWrite, State, Transition
from tests.support.db import OWNER
from tests.support.db import test_database_url as database_url
from tests.support.pools import PoolProcesses, state_of, submit, wait_for
from workers.runtime.selectors import pool_consumers
from workers.runtime.services import pool_pause, pool_resume

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def pools(django_db_setup, django_db_blocker, tmp_path_factory):
    processes = PoolProcesses(str(tmp_path_factory.mktemp("run")))
    processes.start("control")
    processes.start("crawl")
    yield processes
    processes.stop_all()


def running_attempt(job, lease_version=1):
    return wait_for(
        lambda: Attempt.objects.filter(job=job, lease_version=lease_version, started_at__isnull=False).first(),
        timeout=20,
        message=f"attempt {lease_version} of {job.id} to start",
    )


def test_a_pool_runs_jobs_end_to_end(pools):
    # Workers register when they start, so an idle pool already shows its consumers.
    wait_for(lambda: pool_consumers()["crawl"] == 2, timeout=20, message="two live crawl consumers")
    jobs = [submit({"steps": ["fetch", "store"], "effect": True}) for _ in range(20)]
    wait_for(
        lambda: all(state_of(j) == State.RESULT_STORED for j in jobs),
        timeout=30,
        message="20 synthetic jobs to complete",
    )
    assert Effect.objects.filter(job__in=jobs).count() == 20


def test_kill_9_mid_job_the_job_completes_exactly_once_on_another_worker(pools):
    job = submit({"duration_ms": 1500})
    first = running_attempt(job)
    os.kill(first.worker_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    second = running_attempt(job, lease_version=2)
    recovered_in = time.monotonic() - killed_at
    assert recovered_in < 5, f"the pool's supervisor hands a dead worker's job back at once, took {recovered_in:.1f} s"
    assert second.worker_pid != first.worker_pid
    wait_for(lambda: state_of(job) == State.RESULT_STORED, timeout=20)
    assert Transition.objects.filter(job=job, to_state=State.RESULT_STORED).count() == 1
    assert Attempt.objects.get(job=job, lease_version=1).outcome == Attempt.Outcome.WORKER_DIED


def test_sigstop_past_the_lease_the_late_write_is_refused_and_the_effect_applied_once(pools):
    job = submit({"duration_ms": 1500, "effect": True})
    first = running_attempt(job)
    os.kill(first.worker_pid, signal.SIGSTOP)
    try:
        wait_for(lambda: state_of(job) == State.RESULT_STORED, timeout=30, message="another worker completes the job")
    finally:
        os.kill(first.worker_pid, signal.SIGCONT)
    wait_for(
        lambda: StaleWrite.objects.filter(job=job, lease_version=1).exists(),
        timeout=15,
        message="the resumed worker's late write to be refused",
    )
    time.sleep(2)  # let the resumed worker finish whatever it still tries
    (effect,) = Effect.objects.filter(job=job)
    assert effect.result == {"applied_by_attempt": effect.lease_version} and effect.lease_version >= 2
    job.refresh_from_db()
    assert job.state == State.RESULT_STORED and job.result_ref.endswith(f"effect-by-attempt-{effect.lease_version}")
    assert Attempt.objects.get(job=job, lease_version=1).refused_writes >= 1


def test_lost_database_connections_lose_no_job_and_repeat_no_effect(pools):
    jobs = [submit({"duration_ms": 20, "effect": True}) for _ in range(200)]
    stop, cut = threading.Event(), []

    def cut_connections():
        # The embedded server's equivalent of a restart, and it works on any PostgreSQL: every
        # other session of the test database is terminated, again and again, while jobs run.
        # The harness acts as the owner (a member of the application role), like an administrator.
        with psycopg.connect(database_url(user=OWNER), autocommit=True) as owner:
            while not stop.wait(0.4):
                terminated = owner.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                cut.append(terminated.fetchone()[0])

    cutter = threading.Thread(target=cut_connections)
    cutter.start()
    try:
        time.sleep(4)
    finally:
        stop.set()
        cutter.join()
    assert sum(cut) >= 5, f"the fault was injected: sessions cut {cut}"
    connection.close()
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.pk for j in jobs], state=State.RESULT_STORED).count() == 200,
        timeout=90,
        interval=0.5,
        message="all 200 jobs to complete after the connection cuts",
    )
    assert Effect.objects.filter(job__in=jobs).count() == 200
    assert Transition.objects.filter(job__in=jobs, to_state=State.RESULT_STORED).count() == 200


def test_a_worker_killed_after_its_effect_the_next_attempt_reuses_it(pools):
    job = submit({"fail": "crash_after_effect", "fail_attempts": 1})
    wait_for(lambda: state_of(job) == State.RESULT_STORED, timeout=30, message="the second attempt completes")
    (effect,) = Effect.objects.filter(job=job)
    job.refresh_from_db()
    assert effect.lease_version == 1, "the effect was applied by the attempt that died"
    assert job.lease_version == 2 and job.result_ref.endswith("effect-by-attempt-1")


def test_an_urgent_job_overtakes_a_flood_of_bulk_jobs(pools):
    bulk_ms = 5
    # Queue the whole flood while the pool is paused, so it is all waiting when the pool resumes.
    pool_pause(pool="crawl", actor="test", reason="queue the flood first")
    try:
        with transaction.atomic():
            for _ in range(2000):
                submit({"duration_ms": bulk_ms}, priority=9)
    finally:
        pool_resume(pool="crawl", actor="test")
    wait_for(lambda: Job.objects.filter(priority=9, state=State.RESULT_STORED).count() > 100, timeout=30)
    urgent = submit({}, priority=0)
    attempt = running_attempt(urgent)
    waited = (attempt.started_at - urgent.created_at).total_seconds()
    assert waited < bulk_ms / 1000 + 1, f"the urgent job waited {waited:.2f} s"
    assert Job.objects.filter(priority=9).exclude(state=State.RESULT_STORED).exists(), "bulk work was still queued"
    wait_for(
        lambda: not Job.objects.filter(priority=9).exclude(state=State.RESULT_STORED).exists(),
        timeout=120,
        interval=0.5,
        message="the flood to drain",
    )


def test_sigterm_finishes_or_hands_back_and_leaves_nothing_leased(pools):
    long_jobs = [submit({"duration_ms": 20000}) for _ in range(2)]
    for job in long_jobs:
        running_attempt(job)
    pools.terminate("crawl", timeout=30)
    for job in long_jobs:
        job.refresh_from_db()
        assert job.state == State.PLANNED, "handed back at once"
        assert Attempt.objects.get(job=job).outcome == Attempt.Outcome.RELEASED
    assert not Job.objects.filter(state__in=["reserved", "running"]).exists()
    pools.start("crawl")  # the next attempt resumes the handed-back jobs
    for job in long_jobs:
        running_attempt(job, lease_version=2)
