"""Backup and restore (issue 18): ``manage.py db backup`` dumps the test database, ``db restore`` puts it
into a fresh server (its own roles, nothing else in it), and on the restored copy the console shows
the jobs and a pool runs new work — the procedure of docs/operations.md, performed once."""

import subprocess
import sys
import uuid

import psycopg
import pytest

from devtools import embedded_db
from jobs.models import Job
from tests.support.db import OWNER, child_env
from tests.support.db import test_database_url as database_url
from tests.support.pools import wait_for
from workers.runtime.services import job_submit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

CONSOLE = """
from django.contrib.auth import get_user_model
from django.test import Client
person = get_user_model().objects.create_superuser("restorer", "r@example.org", "x" * 12)
client = Client(HTTP_HOST="localhost")
client.force_login(person)
home = client.get("/admin/")
job = client.get("/admin/jobs/job/JOB/change/")
print(home.status_code, job.status_code, "JOB" in job.content.decode())
"""


def manage(*arguments, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *arguments], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_backup_restores_into_a_fresh_server_where_the_console_and_a_pool_work(tmp_path):
    jobs = [
        job_submit(job_type="synthetic", payload={}, idempotency_key=f"before-{n}", actor="t").job for n in range(5)
    ]
    dump = tmp_path / "leitstand.dump"
    backup = manage("db", "backup", str(dump), env=child_env(LEITSTAND_DATABASE_OWNER_URL=database_url(user=OWNER)))
    assert backup.returncode == 0, backup.stderr
    assert dump.stat().st_size > 10_000

    fresh = embedded_db.start(tmp_path / "restored-pg", throwaway=True)
    env = child_env(
        DATABASE_URL=fresh.database_url(),
        LEITSTAND_DATABASE_OWNER_URL=fresh.database_url(user=embedded_db.OWNER),
        LEITSTAND_DATABASE_MAINTENANCE_URL=fresh.database_url(user=embedded_db.MAINTENANCE),
        LEITSTAND_ALLOWED_HOSTS="localhost",
        LEITSTAND_RUN_DIR=str(tmp_path / "run"),
    )
    restored = manage("db", "restore", str(dump), env=env)
    assert restored.returncode == 0, restored.stderr
    again = manage("db", "restore", str(dump), env=env)
    assert again.returncode != 0 and "not empty" in again.stderr, "a restore never lands on a database in use"

    with psycopg.connect(fresh.database_url(), autocommit=True) as application:  # as the application role
        keys = {row[0] for row in application.execute("SELECT idempotency_key FROM jobs_job")}
        assert keys == {job.idempotency_key for job in Job.objects.all()}
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            application.execute("DELETE FROM jobs_transition")  # the roles' privileges came back

    console = manage("shell", "-c", CONSOLE.replace("JOB", str(jobs[0].pk)), env=env)
    assert console.stdout.split()[-3:] == ["200", "200", "True"], console.stderr[-2000:]

    pool = subprocess.Popen(
        [sys.executable, "manage.py", "runpool", "synthetic"],  # the type's own pool
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        key = f"after-{uuid.uuid4().hex[:8]}"
        enqueued = manage("enqueue", "synthetic", "--count", "3", "--key", key, env=env)
        assert enqueued.returncode == 0, enqueued.stderr

        def ran():
            with psycopg.connect(fresh.database_url(), autocommit=True) as application:
                return (
                    application.execute(
                        "SELECT count(*) FROM jobs_job WHERE idempotency_key LIKE %s AND state IN ('result_stored', 'done')",
                        [f"{key}%"],
                    ).fetchone()[0]
                    == 3
                    and not application.execute(
                        "SELECT 1 FROM jobs_job WHERE idempotency_key LIKE 'before-%%' AND state = 'planned' LIMIT 1"
                    ).fetchone()
                )

        wait_for(ran, timeout=60, message="the pool on the restored copy ran new and restored jobs")
    finally:
        pool.terminate()
        pool.wait(timeout=30)
