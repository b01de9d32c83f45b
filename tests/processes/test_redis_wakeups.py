"""Wake-ups through Redis (``LEITSTAND_WAKEUP_REDIS_URL``, issue 19): the pools take their wake-ups
from a real redis-server and none from PostgreSQL's queue table; with Redis killed (kill -9) jobs
are still submitted and still start, within about one sweep interval, because the pools wake
themselves; with Redis back, wake-ups flow through it again."""

import json
import subprocess
import sys

import pytest
from django.db import connection

from devtools.redis_local import LocalRedis
from jobs.models import Attempt, Job, State
from tests.support.db import PROJECT_ROOT
from tests.support.pools import PoolProcesses, wait_for
from workers.runtime.selectors import pool_consumers

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

JOBS = 20
SWEEP_SECONDS = 0.5  # LEITSTAND_CONTROL_INTERVAL_SECONDS of these processes


@pytest.fixture
def redis_server():
    server = LocalRedis().start()
    yield server
    server.close()


def enqueue(processes: PoolProcesses, tag: str) -> list[Job]:
    """Submitted by another process configured as the pools are (its wake-ups go to Redis)."""
    result = subprocess.run(
        [sys.executable, "manage.py", "enqueue", "synthetic", "--count", str(JOBS)]
        + ["--payload", json.dumps({"pool": "crawl", "steps": ["fetch"]}), "--correlation-id", tag],
        cwd=PROJECT_ROOT,
        env=processes.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return list(Job.objects.filter(correlation_id=tag))


def all_done(processes: PoolProcesses, jobs: list[Job]) -> bool:
    processes.check_running()
    return Job.objects.filter(pk__in=[j.pk for j in jobs], state=State.RESULT_STORED).count() == len(jobs)


def first_start(jobs: list[Job]) -> float:
    """Seconds from the first job's creation to the first claim of any of ``jobs`` (database time):
    how long the pool took to wake up for them."""
    claimed = Attempt.objects.filter(job__in=jobs).order_by("claimed_at").values_list("claimed_at", flat=True)[0]
    return (claimed - min(j.created_at for j in jobs)).total_seconds()


def queue_table_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'django_q_ormq'")
        return cursor.fetchone()[0]


def test_wake_ups_through_redis_and_the_pools_wake_themselves_while_it_is_away(tmp_path, redis_server):
    processes = PoolProcesses(
        str(tmp_path),
        LEITSTAND_WAKEUP_REDIS_URL=redis_server.url,
        LEITSTAND_CONTROL_INTERVAL_SECONDS=str(SWEEP_SECONDS),
    )
    try:
        processes.start("control")
        processes.start("crawl")
        wait_for(lambda: pool_consumers()["crawl"] == 2, timeout=30, message="two crawl workers")
        inserted_before = queue_table_rows()
        first = enqueue(processes, "through-redis")
        wait_for(lambda: all_done(processes, first), timeout=60, message="jobs woken through Redis")

        redis_server.kill()
        second = enqueue(processes, "redis-away")  # submitting does not fail: a wake-up is a hint
        wait_for(lambda: all_done(processes, second), timeout=60, message="jobs while Redis is away")
        away = first_start(second)
        # The pool's own check runs every second and wakes idle workers once work waited one sweep
        # interval: a lost wake-up costs about that, not the pool's stall time or a restart.
        assert away < 1.0 + SWEEP_SECONDS + 1.0, f"the pool woke up {away:.2f} s after the first job"

        redis_server.start()
        third = enqueue(processes, "redis-back")
        wait_for(lambda: all_done(processes, third), timeout=60, message="jobs after Redis is back")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        assert queue_table_rows() == inserted_before, "no wake-up went through PostgreSQL's queue table"
        print(processes.log("crawl")[-3000:])
        print(processes.log("control")[-1500:])
        print(f"woke after: Redis {first_start(first):.3f} s, away {away:.3f} s, back {first_start(third):.3f} s")
    finally:
        processes.stop_all()
