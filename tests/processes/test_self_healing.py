"""A pool heals itself: real `runpool` processes lose workers, their pusher, their monitor, their
supervisor and their main process to SIGKILL at any moment, and keep (or stop) working as documented.

Before the supervisor (workers/runtime/supervisor/) a kill -9 of an idle django-q2 worker left the shared
task queue's lock with a dead process and froze the pool for good (django-q2 #23)."""

import os
import signal
import time

import psutil
import pytest
from django.db import connection, connections, transaction

from alerts.models import Alert
from jobs.models import Attempt, Job, State, database_now
from tests.support.pools import PoolProcesses, process_title, state_of, submit, wait_for
from workers.runtime import dispatch
from workers.runtime.models import Pool
from workers.runtime.services import pool_pause, pool_resume

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

STALL = 1.0  # LEITSTAND_POOL_STALL_SECONDS for these pools
# Long leases: every rescue seen here is the supervisor's, never the reaper's (lease + grace = 41 s).
TIMING = {
    "LEITSTAND_WORKER_RECYCLE_AFTER": "10",
    "LEITSTAND_SYNTHETIC_LEASE_SECONDS": "40",
    "LEITSTAND_SYNTHETIC_TIMEOUT_SECONDS": "10",
    "LEITSTAND_NOTIFY_TIMEOUT_SECONDS": "8",
    "LEITSTAND_NOTIFY_HTTP_TIMEOUT_SECONDS": "4",
    "LEITSTAND_POOL_SHUTDOWN_SECONDS": "12",
    "LEITSTAND_POOL_STALL_SECONDS": str(STALL),
}


@pytest.fixture(scope="module")
def pools(django_db_setup, django_db_blocker, tmp_path_factory):
    processes = PoolProcesses(
        str(tmp_path_factory.mktemp("run")),
        **TIMING,
        LEITSTAND_ALERT_FOR_SECONDS="0",
        LEITSTAND_ALERT_CLEAR_SECONDS="0",
        LEITSTAND_ALERT_INTERVAL_SECONDS="0.2",
    )
    processes.start("control")
    processes.start("crawl")
    yield processes
    processes.stop_all()


class Tree:
    """The processes of one running pool, told apart by their titles (setproctitle)."""

    def __init__(self, main_pid: int) -> None:
        self.main = psutil.Process(main_pid)
        (self.supervisor,) = self.main.children()
        self.workers, self.pusher, self.monitor = [], None, None
        for child in self.supervisor.children():
            title = process_title(child)
            if title.endswith(" pusher"):
                self.pusher = child
            elif title.endswith(" monitor"):
                self.monitor = child
            else:
                self.workers.append(child)

    def idle_workers(self) -> list[psutil.Process]:
        idle = []
        for worker in self.workers:
            try:
                if process_title(worker).endswith(" idle"):
                    idle.append(worker)
            except psutil.Error:
                pass  # recycled meanwhile (they are here, every 10 wake-ups)
        return idle


def tree(pools, name="crawl", *, workers=2) -> Tree:
    """Wait until the pool runs with all its processes, then describe them."""

    def complete():
        pools.check_running()
        try:
            found = Tree(pools.processes[name].pid)
        except (ValueError, psutil.Error):
            return None
        if len(found.workers) == workers and found.pusher and found.monitor:
            return found
        return None

    return wait_for(complete, timeout=30, message=f"the {name} pool with {workers} workers, pusher and monitor")


def all_complete(jobs, *, timeout):
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.pk for j in jobs], state=State.RESULT_STORED).count() == len(jobs),
        timeout=timeout,
        interval=0.05,
        message=f"{len(jobs)} jobs to complete",
    )


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill(process) -> None:
    os.kill(process.pid, signal.SIGKILL)


def submissions_complete_within(seconds: float, count: int = 20) -> None:
    with transaction.atomic():
        jobs = [submit({"duration_ms": 10}) for _ in range(count)]
    all_complete(jobs, timeout=seconds)


def test_recycled_workers_lose_no_wake_up(pools):
    # Workers here recycle after 10 wake-ups. A wake-up handed to a worker right after its last
    # result, as it exits to be recycled, once stayed fetched (locked) in the broker until
    # django-q2's retry time. A burst of wake-ups makes that moment common.
    found = tree(pools)
    dispatch.wakeup_send("crawl", count=300)

    def wakeups_waiting():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM django_q_ormq WHERE key = 'crawl'")
            return cursor.fetchone()[0]

    wait_for(lambda: wakeups_waiting() == 0, timeout=30, message="every wake-up to be run and acknowledged")
    assert not {w.pid for w in tree(pools).workers} & {w.pid for w in found.workers}, "the workers recycled"
    submissions_complete_within(5)


def test_kill_9_of_an_idle_worker_the_pool_keeps_working(pools):
    idle = wait_for(lambda: tree(pools).idle_workers()[:1], timeout=10, message="an idle worker")
    kill(idle[0])
    submissions_complete_within(5)


def test_kill_9_of_every_worker_at_once_the_pool_keeps_working(pools):
    found = tree(pools)
    for worker in found.workers:
        kill(worker)
    submissions_complete_within(8)
    replaced = tree(pools)
    assert not {w.pid for w in replaced.workers} & {w.pid for w in found.workers}


def test_kill_9_of_the_pusher_and_of_the_monitor_the_pool_keeps_working(pools):
    found = tree(pools)
    kill(found.pusher)
    submissions_complete_within(5)
    found = tree(pools)
    kill(found.monitor)
    submissions_complete_within(5)
    kill(tree(pools).pusher)
    kill(tree(pools).monitor)
    submissions_complete_within(5)


def test_kill_9_of_the_supervisor_a_new_one_takes_over_and_hands_back_the_orphaned_jobs(pools):
    found = tree(pools)
    job = submit({"duration_ms": 8000})
    first = wait_for(lambda: Attempt.objects.filter(job=job, started_at__isnull=False).first(), timeout=20)
    killed_at = database_now()
    kill(found.supervisor)
    wait_for(
        lambda: not any(alive(p) for p in found.workers),
        timeout=5,
        message="the old supervisor's children to die with it",
    )
    replaced = tree(pools)
    assert replaced.supervisor.pid != found.supervisor.pid and replaced.main.pid == found.main.pid
    submissions_complete_within(5)
    # Nobody saw its workers die; the new supervisor finds their jobs (no such process, no
    # heartbeat for two intervals) long before the 40 s lease runs out.
    second = wait_for(
        lambda: Attempt.objects.filter(job=job, lease_version=2, started_at__isnull=False).first(),
        timeout=15,
        message="the orphaned job to start again",
    )
    assert (second.started_at - killed_at).total_seconds() < 8
    first.refresh_from_db()
    assert first.outcome == Attempt.Outcome.WORKER_DIED and "is gone" in first.error_message


def test_a_crashed_busy_workers_job_starts_again_within_5_s_ahead_of_a_backlog_of_2000(pools):
    tree(pools)
    pool_pause(pool="crawl", actor="test", reason="queue the backlog behind the job")
    victim = submit({"duration_ms": 8000})
    with transaction.atomic():
        backlog = [submit({"duration_ms": 2}) for _ in range(2000)]
    pool_resume(pool="crawl", actor="test")
    first = wait_for(
        lambda: Attempt.objects.filter(job=victim, started_at__isnull=False).first(),
        timeout=20,
        interval=0.02,
        message="the job to start",
    )
    due_at = Job.objects.get(pk=victim.pk).due_at
    killed_at = database_now()
    os.kill(first.worker_pid, signal.SIGKILL)
    second = wait_for(
        lambda: Attempt.objects.filter(job=victim, lease_version=2, started_at__isnull=False).first(),
        timeout=10,
        interval=0.05,
        message="the crashed worker's job to start again",
    )
    assert (second.started_at - killed_at).total_seconds() < 5
    ahead = Attempt.objects.filter(job__in=backlog, started_at__lt=second.started_at).count()
    assert ahead < 500, f"{ahead} of the 2,000 jobs queued after it started before it"
    first.refresh_from_db()
    assert (first.outcome, first.error_class) == (Attempt.Outcome.WORKER_DIED, "WorkerDied")
    victim.refresh_from_db()
    assert victim.due_at == due_at and victim.attempts == 2, "due again at once, in its place; the attempt counts"
    all_complete([victim, *backlog], timeout=120)


def test_a_job_that_kills_its_worker_every_time_is_dead_as_a_suspected_poison_job(pools):
    poison = submit({"fail": "crash"})
    others = []
    deadline = time.monotonic() + 60
    while state_of(poison) != State.DEAD:
        assert time.monotonic() < deadline, "the poison job should be dead after 3 worker deaths"
        others.append(submit())
        time.sleep(0.2)
    poison.refresh_from_db()
    assert poison.error_class == "WorkerDied"
    assert poison.completion_reason == "suspected poison job: its worker died in 3 attempts"
    outcomes = list(Attempt.objects.filter(job=poison).order_by("lease_version").values_list("outcome", flat=True))
    assert outcomes == [Attempt.Outcome.WORKER_DIED] * 3
    all_complete(others, timeout=20)


def test_a_stall_that_cannot_heal_fires_pool_stalled_and_clears_when_the_pool_claims_again(pools):
    tree(pools)
    pool_pause(pool="crawl", actor="test", reason="the jobs must be due before the pool sees them")
    jobs = [submit() for _ in range(3)]
    # Another session holds the due jobs' rows: every claim skips them (FOR UPDATE SKIP LOCKED), so
    # neither waking nor restarting the workers can help.
    holder = connections.create_connection("default")
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute("SELECT id FROM jobs_job WHERE id = ANY(%s) FOR UPDATE", [[j.pk for j in jobs]])
    try:
        pool_resume(pool="crawl", actor="test")
        alert = wait_for(
            lambda: Alert.objects.filter(rule="pool_stalled", scope="pool:crawl", state="firing").first(),
            timeout=20,
            message="pool_stalled to fire",
        )
        pool = Pool.objects.get(name="crawl")
        assert pool.stalled_since is not None and "no claim" in pool.stall_note
        assert alert.diagnosis.startswith("crawl: stalled since ")
        assert all(state_of(j) == State.PLANNED for j in jobs)
    finally:
        holder.rollback()
        holder.close()
    all_complete(jobs, timeout=10)
    wait_for(lambda: Pool.objects.get(name="crawl").stalled_since is None, timeout=5, message="the stall to clear")
    wait_for(
        lambda: Alert.objects.filter(rule="pool_stalled", scope="pool:crawl", state="resolved").exists(),
        timeout=10,
        message="pool_stalled to resolve",
    )


def test_sigterm_stops_a_pool_whose_worker_was_just_killed(pools):
    found = tree(pools)
    running = submit({"duration_ms": 8000})
    attempt = wait_for(lambda: Attempt.objects.filter(job=running, started_at__isnull=False).first(), timeout=20)
    for _ in range(20):  # an idle worker may recycle itself meanwhile: then kill the one replacing it
        idle = next(w for w in tree(pools).workers if w.pid != attempt.worker_pid)
        try:
            kill(idle)
            break
        except ProcessLookupError:
            continue
    children = found.supervisor.children()
    started = time.monotonic()
    try:
        assert pools.terminate("crawl", timeout=15) == 0
    finally:
        pools.start("crawl")
    assert time.monotonic() - started < 10
    assert not Job.objects.filter(state__in=[State.RESERVED, State.RUNNING]).exists()
    assert state_of(running) == State.PLANNED
    assert not any(alive(p) for p in [found.supervisor, *children]), "a child outlived its pool"
    all_complete([running], timeout=40)


def test_sigterm_stops_a_pool_within_its_shutdown_time_even_when_a_worker_is_frozen(pools):
    found = tree(pools)
    job = submit({"duration_ms": 8000})
    attempt = wait_for(lambda: Attempt.objects.filter(job=job, started_at__isnull=False).first(), timeout=20)
    os.kill(attempt.worker_pid, signal.SIGSTOP)  # frozen: hears neither the drain nor its time limit
    started = time.monotonic()
    try:
        assert pools.terminate("crawl", timeout=30) == 0
    finally:
        pools.start("crawl")
    took = time.monotonic() - started
    assert 11 < took < 20, f"stopped after {took:.1f} s; the shutdown time is 12 s"
    assert not any(alive(p) for p in [found.supervisor, *found.workers])
    assert state_of(job) == State.PLANNED, "the frozen worker's job was handed back"
    assert Attempt.objects.get(pk=attempt.pk).outcome == Attempt.Outcome.WORKER_DIED
    all_complete([job], timeout=40)


def test_sigterm_to_every_process_of_the_pool_stops_it_and_hands_back_its_jobs(pools):
    # What `kill -TERM -<pgid>` or a service manager without KillMode=mixed does.
    found = tree(pools)
    job = submit({"duration_ms": 8000})
    wait_for(lambda: Attempt.objects.filter(job=job, started_at__isnull=False).exists(), timeout=20)
    process = pools.processes.pop("crawl")
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    finally:
        pools.start("crawl")
    assert not any(alive(p) for p in [found.supervisor, *found.workers, found.pusher, found.monitor])
    assert state_of(job) == State.PLANNED and not Job.objects.filter(state__in=[State.RESERVED, State.RUNNING]).exists()
    all_complete([job], timeout=40)


def test_no_child_outlives_a_killed_main_process(pools):
    found = tree(pools)
    descendants = found.supervisor.children() + [found.supervisor]
    pools.processes.pop("crawl")
    kill(found.main)
    wait_for(
        lambda: not any(alive(p) for p in descendants), timeout=10, message="every child of the killed pool to exit"
    )
    pools.start("crawl")
    tree(pools)
    submissions_complete_within(8)
