"""A tasks pool without Leitstand's identity (issue 54, item 13): a ``@task`` ran with the
application's database role, the secret key, the webhook secrets and the metrics token. With
``LEITSTAND_TASKS_ONLY`` and the tasks role (config/db_roles.py) the pool claims, runs and ends its
jobs, and the task reaches none of them."""

import subprocess
import sys

import pytest
from django.conf import settings

from tests.support import db
from tests.support.pools import PoolProcesses, wait_for
from tests.support.tasksapp import tasks
from workers.runtime.tasks import TaskResultStatus

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

IDENTITY = ("LEITSTAND_SECRET_KEY", "LEITSTAND_WEBHOOK_SECRET", "LEITSTAND_METRICS_TOKEN", "LEITSTAND_DEBUG")


def tasks_only_env(processes: PoolProcesses) -> None:
    for name in IDENTITY:
        processes.env.pop(name, None)
    processes.env.update(
        LEITSTAND_TASKS_ONLY="true",
        DATABASE_URL=db.test_database_url(user=settings.LEITSTAND_DB_ROLES["tasks"]),
        LEITSTAND_DATABASE_MAINTENANCE_URL="",
    )


def test_a_tasks_only_pool_runs_tasks_that_reach_no_secret(tmp_path):
    processes = PoolProcesses(str(tmp_path))
    tasks_only_env(processes)
    processes.start("tasks")
    try:
        added, reached = tasks.add.enqueue(2, 40), tasks.reach.enqueue()
        wait_for(
            lambda: processes.check_running() and tasks.reach.get_result(reached.id).is_finished,
            timeout=60,
            message="the tasks-only pool to run its tasks",
        )
        assert tasks.add.get_result(added.id).return_value == 42
        result = tasks.reach.get_result(reached.id)
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
        assert result.return_value == {
            "jobs_client": "denied",
            "jobs_apitoken": "denied",
            "auth_user": "denied",
            "django_session": "denied",
            "dashboard_contact": "denied",
            "secret_key": "refused",
            "webhook_secret": "",
            "metrics_token": "",
            "role": settings.LEITSTAND_DB_ROLES["tasks"],
        }
        # A task enqueues another: its job is created (the control process's dispatcher would wake
        # a pool of another type), and this pool, reading no broker, wakes itself for its own.
        chained = tasks.chain.enqueue(5)
        wait_for(lambda: tasks.chain.get_result(chained.id).is_finished, timeout=30, message="the chaining task")
        child_id = tasks.chain.get_result(chained.id).return_value
        wait_for(lambda: tasks.add.get_result(child_id).is_finished, timeout=30, message="the chained task")
        assert tasks.add.get_result(child_id).return_value == 6
    finally:
        processes.stop_all()
    log = processes.log("tasks")
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]


def test_a_tasks_only_process_runs_no_other_pool(tmp_path):
    processes = PoolProcesses(str(tmp_path))
    tasks_only_env(processes)
    run = subprocess.run(
        [sys.executable, "manage.py", "runpool", "crawl"],
        cwd=db.PROJECT_ROOT,
        env=processes.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "LEITSTAND_TASKS_ONLY" in run.stderr and "tasks" in run.stderr, run.stderr[-2000:]
