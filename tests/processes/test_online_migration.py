"""Migration of a live installation to issue 37's layout (migrations 0031 and 0032: index entries
only where they are read, an attempt's end a HOT update, time-ordered job IDs): from 0030, with jobs
in every state, while a real pool runs jobs and a producer submits more. Every index is built and
dropped concurrently, so nobody waits on the migration; every job keeps its state and goes on."""

import threading
import time
import uuid

import psycopg
import pytest
from django.db import connection, connections

from jobs.models import Job, State
from tests.conftest import job_in_state
from tests.support.db import migrate_to
from tests.support.db import test_database_url as database_url
from tests.support.pools import PoolProcesses, state_of, submit, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

BEFORE = [("jobs", "0030_client_uses_global_webhook")]
PARENT_FOREIGN_KEY_INDEX = "jobs_job_parent_id_675bb714"
HELD = 4.0  # seconds a writer stays in its transaction as the migration begins


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


class Producer(threading.Thread):
    """Submits a synthetic job every 20 ms and times each submission: what a caller sees meanwhile."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.jobs: list[Job] = []
        self.slowest = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                self.jobs.append(submit())
                self.slowest = max(self.slowest, time.monotonic() - began)
                time.sleep(0.02)
        except BaseException as error:  # reported by the test, not lost in the thread
            self.error = error
        finally:
            connections.close_all()


def writer_in_transaction(seconds: float) -> threading.Timer:
    """A session that is writing to the job and attempt tables and stays in its transaction for
    ``seconds``. A migration step that must stop writers (a plain CREATE INDEX, a table rewrite) queues
    behind it, and every writer after it queues behind that step; a concurrent build waits for it
    alone."""
    session = psycopg.connect(database_url())
    session.execute("LOCK TABLE jobs_job, jobs_attempt IN ROW EXCLUSIVE MODE")  # what an INSERT takes
    timer = threading.Timer(seconds, session.close)  # closing ends the transaction
    timer.start()
    return timer


def test_a_live_installation_moves_to_the_new_layout_while_the_pools_go_on(tmp_path):
    migrate_to(BEFORE)
    try:
        assert PARENT_FOREIGN_KEY_INDEX in indexes("jobs_job") and "job_parent_idx" not in indexes("jobs_job")
        assert "attempt_unchecked_idx" in indexes("jobs_attempt") and fillfactor("jobs_attempt") is None

        # Jobs in every state, in a pool no process runs (they stay as they are), and a parent with
        # its children; their leases, where they hold one, run for an hour.
        parent = submit(pool="analysis")
        children = [submit(pool="analysis", parent_id=parent.pk) for _ in range(3)]
        kept = {}
        for state in State:
            job = job_in_state(submit(pool="analysis"), state) if state != State.PLANNED else submit(pool="analysis")
            kept[job.pk] = state.value
        Job.objects.filter(pk__in=list(kept), state__in=["reserved", "running"]).update(
            lease_expires_at=job.created_at.replace(year=job.created_at.year + 1)
        )
        waiting = [submit() for _ in range(200)]  # the running pool's backlog

        pools = PoolProcesses(str(tmp_path))
        producer = Producer()
        try:
            pools.start("control")
            pools.start("crawl")
            wait_for(
                lambda: any(state_of(j) == State.RESULT_STORED for j in waiting), timeout=60, message="a first job"
            )
            producer.start()
            began = time.monotonic()
            writer_in_transaction(HELD)
            migrate_to(None)
            took = time.monotonic() - began
            producer.stop.set()
            producer.join(timeout=30)
            assert producer.error is None, producer.error
            pools.check_running()
            everything = waiting + producer.jobs
            wait_for(
                lambda: not Job.objects.filter(pk__in=[j.pk for j in everything])
                .exclude(state="result_stored")
                .exists(),
                timeout=120,
                message=f"{len(everything)} jobs submitted before and during the migration to complete",
            )
            new = submit()
            wait_for(lambda: state_of(new) == State.RESULT_STORED, timeout=30, message="a job after the migration")
        finally:
            producer.stop.set()
            pools.stop_all()
    except BaseException:
        migrate_to(None)
        raise

    # The migration waited for the writer that was in its transaction; nobody waited on the migration:
    # submissions went on throughout (behind a blocking step each would have waited ~HELD seconds).
    assert took >= HELD and len(producer.jobs) > 20 and producer.slowest < HELD / 2, (
        took,
        len(producer.jobs),
        producer.slowest,
    )
    # The new layout, every index valid.
    job_indexes, attempt_indexes = indexes("jobs_job"), indexes("jobs_attempt")
    assert all(job_indexes.values()) and all(attempt_indexes.values())
    assert "job_parent_idx" in job_indexes and PARENT_FOREIGN_KEY_INDEX not in job_indexes
    assert "attempt_to_check_idx" in attempt_indexes and "attempt_unchecked_idx" not in attempt_indexes
    assert fillfactor("jobs_attempt") == "80"
    # Every job kept its state (the unclear one the control process queued for review, as it does),
    # the family its links (found through the new partial index).
    expected = {pk: State.READY_FOR_REVIEW.value if state == State.UNCLEAR else state for pk, state in kept.items()}
    assert dict(Job.objects.filter(pk__in=list(kept)).values_list("pk", "state")) == expected
    assert set(parent.children.all()) == set(children)
    assert uuid.UUID(str(new.pk)).version == 7
