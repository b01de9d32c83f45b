"""Many jobs at once in one worker process (a network-bound pool's ``in_flight``), on real PostgreSQL:
each in a thread of its own with its own lease, fence and error class, the ends written together,
a timeout without an alarm, and a drain that hands back what has not begun. (Real pool processes
killed with jobs in flight: tests/processes/test_pools.py.)"""

import threading
import time
import uuid

import pytest

from jobs import leases
from jobs.errors import PermanentError, TransientError
from jobs.models import Attempt, Job, State
from workers.runtime import lifecycle
from workers.runtime.context import Done
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)


def submit(job_type, key, **payload):
    return job_submit(
        job_type=job_type.name,
        payload={"k": key, **payload},
        idempotency_key=uuid.uuid4().hex,
        actor="test",
    ).job


class Gauge:
    """How many handlers run at once, at most."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.threads = set()

    def __enter__(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)

    def __exit__(self, *exc):
        with self.lock:
            self.now -= 1


def test_a_worker_runs_its_jobs_at_once_each_under_its_own_lease(job_type_factory, pool_runtime):
    gauge = Gauge()

    def handler(ctx):
        with gauge:
            time.sleep(0.3)  # a fetch waiting for its answer
        return Done(reason=f"page {ctx.payload['k']}")

    job_type = job_type_factory(handler, pool="crawl", flow_key="payload.k")
    jobs = [submit(job_type, f"host-{n}") for n in range(12)]
    runtime = pool_runtime("crawl")
    assert runtime.in_flight == 16
    report = runtime.wake()
    assert (report.claimed, report.completed) == (12, 12)
    assert gauge.most >= 8, f"the jobs ran one after another: {gauge.most} at most"
    assert all(name.startswith("crawl-job") for name in gauge.threads)
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.attempts, job.completion_reason) == (State.DONE, 1, f"page {job.payload['k']}")
    versions = Attempt.objects.filter(job__in=jobs).values_list("job_id", "lease_version")
    assert sorted(v for _, v in versions) == [1] * 12, "one attempt, one fencing token per job"


def test_each_job_in_flight_ends_by_its_own_outcome(job_type_factory, pool_runtime):
    def handler(ctx):
        time.sleep(0.05)
        match ctx.payload["k"]:
            case "transient":
                raise TransientError("the site answered 503")
            case "permanent":
                raise PermanentError("the site answered 404")
            case "crash":
                raise RuntimeError("a bug in one handler")
        return Done(reason="ok")

    job_type = job_type_factory(handler, pool="crawl", flow_key="payload.k")
    jobs = {key: submit(job_type, key) for key in ("ok", "transient", "permanent", "crash", "ok-2")}
    report = pool_runtime("crawl").wake()
    assert (report.claimed, report.completed, report.failed) == (5, 2, 3)
    states = {key: Job.objects.get(pk=job.pk) for key, job in jobs.items()}
    assert states["ok"].state == states["ok-2"].state == State.DONE
    assert (states["transient"].state, states["transient"].error_class) == (State.FAILED, "jobs.errors.TransientError")
    assert (states["permanent"].state, states["permanent"].error_class) == (State.DEAD, "jobs.errors.PermanentError")
    assert states["crash"].error_class == "RuntimeError", "one bad handler never stops the others"


def test_a_handler_in_a_thread_past_its_timeout_is_stopped_and_fails_as_a_timeout(job_type_factory, pool_runtime):
    def handler(ctx):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ctx.check_stop()  # cooperative: no alarm reaches a thread
            time.sleep(0.02)
        return Done(reason="never")

    def stubborn(ctx):
        time.sleep(1.0)  # ignores stop requests; ends past its timeout
        return Done(reason="too late")

    polite = job_type_factory(handler, pool="crawl", flow_key="payload.k", timeout_seconds=0.5, heartbeat_seconds=0.1)
    deaf = job_type_factory(stubborn, pool="crawl", flow_key="payload.k", timeout_seconds=0.5, heartbeat_seconds=0.1)
    stopped, late = submit(polite, "a"), submit(deaf, "b")
    pool_runtime("crawl").wake()
    for job in (stopped, late):
        job.refresh_from_db()
        assert (job.state, job.error_class) == (State.FAILED, "workers.runtime.pool.JobTimeout"), job.error_message
        assert "past its timeout of 0.5 s" in job.error_message


def test_draining_hands_back_the_jobs_not_begun_and_stops_those_running(job_type_factory, pool_runtime, monkeypatch):
    started = threading.Event()

    def handler(ctx):
        started.set()
        for _ in range(200):
            ctx.check_stop()
            time.sleep(0.02)
        return Done(reason="finished")

    job_type = job_type_factory(handler, pool="crawl", flow_key="payload.k", heartbeat_seconds=0.1)
    jobs = [submit(job_type, f"h{n}") for n in range(3)]
    runtime = pool_runtime("crawl")
    draining = threading.Event()
    monkeypatch.setattr(lifecycle, "is_draining", draining.is_set)
    threading.Timer(0.5, draining.set).start()
    report = runtime.wake()
    assert started.is_set()
    assert report.released == 3 and report.completed == 0
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.lease_owner) == (State.PLANNED, ""), "handed back at once, in its place"


def test_a_late_write_of_a_lost_lease_is_refused_in_a_thread(job_type_factory, pool_runtime):
    """The lease of a job in flight is taken over (the reaper, an operator): its thread's end is fenced off."""
    release = threading.Event()

    def handler(ctx):
        release.wait(5)
        return Done(reason="late")

    job_type = job_type_factory(handler, pool="crawl", flow_key="payload.k")
    job = submit(job_type, "x")
    runtime = pool_runtime("crawl")
    worker = threading.Thread(target=runtime.wake)
    worker.start()
    deadline = time.monotonic() + 5
    while Job.objects.get(pk=job.pk).state != State.RUNNING and time.monotonic() < deadline:
        time.sleep(0.02)
    Job.objects.filter(pk=job.pk).update(lease_version=7)  # another attempt holds it now
    release.set()
    worker.join(10)
    job.refresh_from_db()
    assert (job.lease_version, job.state) == (7, State.RUNNING), "the old attempt wrote nothing"
    assert Attempt.objects.get(job=job, lease_version=1).refused_writes >= 1


def test_ends_that_cannot_be_written_leave_no_job_held_forever(job_type_factory, pool_runtime, monkeypatch):
    """The database goes away while the ends of jobs in flight are written: the wake-up fails, and the
    jobs it had in hand are no longer heartbeated, so their leases run out and the reaper hands them back."""
    from django.db import OperationalError

    def handler(ctx):
        time.sleep(0.1)
        return Done(reason="ok")

    job_type = job_type_factory(handler, pool="crawl", flow_key="payload.k")
    jobs = [submit(job_type, f"h{n}") for n in range(4)]
    runtime = pool_runtime("crawl")

    def refused(*args, **kwargs):
        raise OperationalError("the server closed the connection")

    monkeypatch.setattr(leases, "complete_many", refused)
    with pytest.raises(OperationalError):
        runtime.wake()
    assert runtime.held == {}, "nothing left for the heartbeat to keep alive"
    assert {Job.objects.get(pk=job.pk).state for job in jobs} == {State.RUNNING}, "the reaper's to hand back"
