"""Migration of a live installation from 0030 to today's layout — issue 37's (0031, 0032: index
entries only where they are read, an attempt's end a HOT update, time-ordered job IDs) and the trace
context's columns (0033) — while the installation's code keeps writing, then the new code's pools
take over. Indexes are built and dropped concurrently and columns added under a short lock timeout,
so no writer waits on the migration; every job keeps its state and goes on.

The writers during the migration are the old code's statements (a job's insert with its creation
transition, an attempt's heartbeat), written out here: the new code needs the new columns, so it can
neither seed the old schema nor run the pools on it — in a deploy, the old code runs while `migrate`
does, and the new code starts after."""

import threading
import time
import uuid

import psycopg
import pytest
from django.db import connection

from jobs.models import Job, State
from tests.support.db import migrate_to
from tests.support.db import test_database_url as database_url
from tests.support.pools import PoolProcesses, state_of, submit, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

BEFORE = [("jobs", "0030_client_uses_global_webhook")]
LAYOUT_37 = [("jobs", "0032_job_ids_time_ordered")]
PARENT_FOREIGN_KEY_INDEX = "jobs_job_parent_id_675bb714"
HELD = 4.0  # seconds a writer stays in its transaction as each migration step begins

# The code of 0030's time: a job's insert with its creation transition (jobs/queries.sql then), and an
# attempt's heartbeat. Every column it leaves out has a database default, then as now.
OLD_INSERT = """
WITH created AS (
    INSERT INTO jobs_job (id, type, pool, key_namespace, idempotency_key, request_hash, client_id, correlation_id,
                          parent_id, batch_id, schema_version, priority, source, subject, payload, max_attempts,
                          due_at, state)
    VALUES (%(id)s, 'synthetic', %(pool)s, '', %(key)s, '', NULL, 'migration', %(parent)s, NULL, 1, 5, '', '',
            %(payload)s, 5, now(), %(state)s)
    RETURNING id, state
)
INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
SELECT id, '', state, now(), 0, 'created', 'old code' FROM created
"""
OLD_ATTEMPT = """
INSERT INTO jobs_attempt (job_id, lease_version, job_type, lease_owner, worker_host, worker_pid, pool, claimed_at,
                          outcome, error_class, error_message, refused_writes, last_refused_op)
VALUES (%s, 1, 'synthetic', 'old-host:1', 'old-host', 1, 'analysis', now(), '', '', '', 0, '') RETURNING id
"""
OLD_HEARTBEAT = "UPDATE jobs_attempt SET heartbeat_at = now() WHERE id = %s"


def old_job(session, *, pool: str, state: str = "planned", parent=None) -> uuid.UUID:
    job_id = uuid.uuid4()
    session.execute(
        OLD_INSERT,
        {
            "id": job_id,
            "pool": pool,
            "key": f"old-{job_id}",
            "parent": parent,
            "payload": '{"pool": "%s"}' % pool,
            "state": state,
        },
    )
    return job_id


def indexes(table: str) -> dict[str, bool]:
    """The table's indexes by name, each with whether it is valid (a failed concurrent build leaves an
    invalid one behind)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass",
            [table],
        )
        return dict(cursor.fetchall())


def fillfactor(table: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
        options = cursor.fetchone()[0] or []
    return next((o.split("=")[1] for o in options if o.startswith("fillfactor=")), None)


class OldCode(threading.Thread):
    """Every 20 ms a job submitted and an attempt's heartbeat, each timed: what the old code's callers
    and workers see while the migration runs."""

    def __init__(self, attempt_id: int) -> None:
        super().__init__(daemon=True)
        self.attempt_id = attempt_id
        self.stop = threading.Event()
        self.jobs: list[uuid.UUID] = []
        self.slowest = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(database_url(), autocommit=True) as session:
                while not self.stop.is_set():
                    began = time.monotonic()
                    self.jobs.append(old_job(session, pool="crawl"))
                    session.execute(OLD_HEARTBEAT, [self.attempt_id])
                    self.slowest = max(self.slowest, time.monotonic() - began)
                    time.sleep(0.02)
        except BaseException as error:  # reported by the test, not lost in the thread
            self.error = error


def writer_in_transaction(seconds: float) -> threading.Timer:
    """A session that is writing to the job and attempt tables and stays in its transaction for
    ``seconds``. A migration step that must stop writers (a plain CREATE INDEX, waiting for ALTER
    TABLE's lock) queues behind it, and every writer after it queues behind that step; a concurrent
    build waits for it alone, and a short lock timeout gives way and tries again."""
    session = psycopg.connect(database_url())
    session.execute("LOCK TABLE jobs_job, jobs_attempt IN ROW EXCLUSIVE MODE")  # what an INSERT takes
    timer = threading.Timer(seconds, session.close)  # closing ends the transaction
    timer.start()
    return timer


def migrate_while_held(targets) -> float:
    began = time.monotonic()
    writer_in_transaction(HELD)
    migrate_to(targets)
    return time.monotonic() - began


def test_a_live_installation_moves_to_the_new_layout_while_its_writers_go_on(tmp_path):
    migrate_to(BEFORE)
    old_code = None
    try:
        assert PARENT_FOREIGN_KEY_INDEX in indexes("jobs_job") and "job_parent_idx" not in indexes("jobs_job")
        assert "attempt_unchecked_idx" in indexes("jobs_attempt") and fillfactor("jobs_attempt") is None
        with psycopg.connect(database_url(), autocommit=True) as session:
            # Jobs in every state in a pool no process runs (they stay as they are), a parent with its
            # children, and a backlog for the crawl pool.
            kept = {old_job(session, pool="analysis", state=state.value): state.value for state in State}
            parent = old_job(session, pool="analysis")
            children = {old_job(session, pool="analysis", parent=parent) for _ in range(3)}
            waiting = [old_job(session, pool="crawl") for _ in range(200)]
            (attempt_id,) = session.execute(OLD_ATTEMPT, [parent]).fetchone()

        old_code = OldCode(attempt_id)
        old_code.start()
        took_37 = migrate_while_held(LAYOUT_37)  # concurrent index builds wait for the writer
        took_trace = migrate_while_held(None)  # the columns' brief lock, tried again until it is free
        old_code.stop.set()
        old_code.join(timeout=30)
        assert old_code.error is None, old_code.error
    except BaseException:
        if old_code is not None:
            old_code.stop.set()
        migrate_to(None)
        raise

    # Each step waited for the writer in its transaction; no write of the old code waited on a step
    # (behind a blocking one, each would have waited about HELD seconds).
    assert took_37 >= HELD and took_trace >= HELD, (took_37, took_trace)
    assert len(old_code.jobs) > 40 and old_code.slowest < HELD / 2, (len(old_code.jobs), old_code.slowest)
    # The new layout, every index valid.
    job_indexes, attempt_indexes = indexes("jobs_job"), indexes("jobs_attempt")
    assert all(job_indexes.values()) and all(attempt_indexes.values())
    assert "job_parent_idx" in job_indexes and PARENT_FOREIGN_KEY_INDEX not in job_indexes
    assert "attempt_to_check_idx" in attempt_indexes and "attempt_unchecked_idx" not in attempt_indexes
    assert fillfactor("jobs_attempt") == "80"
    assert set(Job.objects.filter(pk__in=list(kept)).values_list("trace_parent", flat=True)) == {""}

    # The new code's pools take over: the backlog and everything the old code submitted meanwhile runs.
    pools = PoolProcesses(str(tmp_path))
    try:
        pools.start("control")
        pools.start("crawl")
        everything = waiting + old_code.jobs
        wait_for(
            lambda: not Job.objects.filter(pk__in=everything).exclude(state="result_stored").exists(),
            timeout=120,
            message=f"{len(everything)} jobs submitted before and during the migration to complete",
        )
        new = submit()
        wait_for(lambda: state_of(new) == State.RESULT_STORED, timeout=30, message="a job after the migration")
    finally:
        pools.stop_all()
    # Every job kept its state (the unclear one the control process queued for review, as it does),
    # the family its links (found through the new partial index).
    expected = {pk: State.READY_FOR_REVIEW.value if state == State.UNCLEAR else state for pk, state in kept.items()}
    assert dict(Job.objects.filter(pk__in=list(kept)).values_list("pk", "state")) == expected
    assert set(Job.objects.filter(parent_id=parent).values_list("pk", flat=True)) == children
    assert uuid.UUID(str(new.pk)).version == 7
