import logging
import uuid

import pytest

from jobs import insert, leases
from jobs.logs import ContextFilter
from jobs.models import Attempt, Job
from jobs.retry import RetryPolicy
from tests.support.db import (
    MOVABLE_CLOCK,
    OWNER,
    POOLED,
    ApplicationRole,
    DatabaseClock,
    maintenance_database_url,
    roles_ensure,
    test_database_url,
)
from workers.runtime.pool import PoolRuntime
from workers.runtime.registry import JobType, registry


@pytest.fixture(autouse=True)
def _reaper_unpaced():
    """Each test's reaper walks when asked: a walk that took long in an earlier test (a slow moment
    of the machine) would otherwise pace the next test's (workers/runtime/pace.py)."""
    from workers.runtime import reaper_sweep

    reaper_sweep._pace.due = 0.0


@pytest.fixture(autouse=True)
def _flow_reads_forgotten():
    """What a claim remembers of a pool's lanes and limits (jobs.leases) was read from a database
    state an earlier test rolled back."""
    leases.flow_settings_changed()


@pytest.fixture
def worker():
    return leases.WorkerIdentity(host="test-host", pid=4242, pool="crawl")


@pytest.fixture
def make_job(db):
    def make(type: str = "crawl", **fields) -> Job:
        """A job inserted as test setup (any pool, priority, parent): a registered type's subject and
        flow key as its registration declares them, as ``job_submit`` would."""
        fields.setdefault("idempotency_key", str(uuid.uuid4()))
        fields.setdefault("payload", {"url": "https://example.org/a.jpg"})
        if registry.known(type):
            declared = registry.get(type)
            fields.setdefault("subject", declared.subject_of(fields["payload"]))
            fields.setdefault("flow_key_declaration", declared.flow_key)
        return insert.job_insert(type=type, actor="test", **fields).job

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
        job=job,
        lease_version=lease_version,
        defaults={
            "lease_owner": "test-host:4242",
            "worker_host": "test-host",
            "worker_pid": 4242,
            "claimed_at": job.created_at,
        },
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


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database as production has it, plus a clock tests can move: created and migrated by
    the owner (which grants the roles their privileges), then every test runs as the application."""
    from django.conf import settings
    from django.db import connection

    from config.db_roles import grants_apply

    with django_db_blocker.unblock():
        roles_ensure()
        with connection.cursor() as cursor:
            cursor.execute(MOVABLE_CLOCK)
        grants_apply(force=True)  # also when pytest-django reused a database it did not migrate now
        settings.LEITSTAND_DATABASE_MAINTENANCE_URL = maintenance_database_url()
        ApplicationRole.on()
    yield
    with django_db_blocker.unblock():
        ApplicationRole.off()
        if POOLED:  # PgBouncer's idle server connections would keep the test database from being dropped
            import psycopg

            name = connection.settings_dict["NAME"]
            connection.close()
            with psycopg.connect(test_database_url(user=OWNER).rsplit("/", 1)[0] + "/postgres") as server:
                server.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s", [name]
                )


def retrying_on_deadlock(handle):
    """``flush``'s handle, as the owner, tried again when PostgreSQL made its TRUNCATE a deadlock's
    victim."""
    import time

    from django.core.management.base import CommandError

    def retrying(self, *args, **options):
        was = ApplicationRole.active
        ApplicationRole.off()  # TRUNCATE is the owner's
        try:
            for attempt in range(5):
                try:
                    return handle(self, *args, **options)
                except CommandError as exc:
                    if "deadlock detected" not in str(exc.__cause__) or attempt == 4:
                        raise
                    time.sleep(0.2 * (attempt + 1))
        finally:
            if was:
                ApplicationRole.on()

    return retrying


@pytest.fixture(autouse=True, scope="session")
def _flush_retries_a_deadlock():
    """Tests with real pool processes flush the database (TRUNCATE of every table) while those
    processes still work on it; PostgreSQL may pick the TRUNCATE as a deadlock's victim (it takes
    its locks table by table, a completion's triggers take theirs in another order). The flush is
    then tried again — the deadlock is between the test harness and the pool, not in the product."""
    from django.core.management.commands import flush

    original = flush.Command.handle
    flush.Command.handle = retrying_on_deadlock(original)
    yield
    flush.Command.handle = original


@pytest.fixture
def job_type():
    """Register a job type for this test only: ``job_type(name, handler, **fields)``, in the crawl
    pool with relaxed timings unless ``fields`` say otherwise."""
    declared = []

    def register(name: str, handler, **fields) -> JobType:
        defaults = {
            "pool": "crawl",
            "timeout_seconds": 20,
            "lease_seconds": 30,
            "heartbeat_seconds": 5,
            "retry": RetryPolicy(),
            "processing_version": f"{name}@1",
            "expected_paths": ("x",),
        }
        declared.append(registry.register(JobType(name=name, handler=handler, **{**defaults, **fields})))
        return declared[-1]

    yield register
    for each in declared:
        registry.unregister(each.name)


@pytest.fixture
def log_records():
    """The records the root logger handles from now on (INFO and above), with the bound fields on them
    as production's handler gets them (jobs.logs.ContextFilter)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.INFO)
    handler.addFilter(ContextFilter())
    handler.emit = records.append
    root = logging.getLogger()
    root.addHandler(handler)
    previous = root.level
    root.setLevel(logging.INFO)
    yield records
    root.removeHandler(handler)
    root.setLevel(previous)


@pytest.fixture
def spans():
    """Spans recorded from now on (jobs/tracing.py with the SDK's in-memory exporter): as the OTLP
    export would send them, handed over as each ends."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from jobs import tracing

    exporter = InMemorySpanExporter()
    tracing.configure(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.unconfigure()
