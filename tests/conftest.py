import uuid

import pytest

from jobs import leases, services
from jobs.models import Attempt, Job
from tests.support.db import DatabaseClock
from workers.runtime import PoolRuntime


@pytest.fixture
def worker():
    return leases.WorkerIdentity(host="test-host", pid=4242, pool="crawl")


@pytest.fixture
def make_job(db):
    def make(type: str = "crawl", **fields) -> Job:
        fields.setdefault("idempotency_key", str(uuid.uuid4()))
        fields.setdefault("payload", {"url": "https://example.org/a.jpg"})
        return services.job_create(type=type, actor="test", **fields).job

    return make


@pytest.fixture
def db_clock(db):
    clock = DatabaseClock()
    yield clock
    clock.reset()


def job_in_state(job: Job, state: str, *, lease_version: int = 1, attempts: int = 1) -> Job:
    """Put a job into any state for table-driven tests (bypassing the FSM on purpose, as setup only)."""
    Job.objects.filter(pk=job.pk).update(state=state, lease_version=lease_version, attempts=attempts)
    Attempt.objects.get_or_create(
        job=job, lease_version=lease_version,
        defaults={"lease_owner": "test-host:4242", "worker_host": "test-host", "worker_pid": 4242,
                  "claimed_at": job.created_at},
    )
    job.refresh_from_db()
    return job


@pytest.fixture
def pool_runtime():
    """A PoolRuntime in this process; its heartbeat thread is stopped after the test."""
    made = []

    def make(pool: str = "analysis") -> PoolRuntime:
        runtime = PoolRuntime(pool)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.close()
