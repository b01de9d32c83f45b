"""Django ``@task`` functions of an installed app (tests/support/tasksapp) on a real ``tasks`` pool and the
control process: enqueued on commit, run, read with ``get_result``; a failing task retried and then
dead, its job in the dead-letter queue and on the console's job page; ``run_after`` and priorities
honoured."""

import os
import signal
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from jobs.models import Attempt, Job, State
from tests.support.db import child_env
from tests.support.pools import wait_for
from tests.support.servers import free_port, production_server, wait_until_answers
from tests.support.tasksapp import tasks
from workers.runtime.tasks import TaskResultStatus, type_name

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_tasks_run_on_a_pool_and_their_results_are_read(tasks_pools, client):
    with transaction.atomic():
        added = tasks.add.enqueue(2, 40)
        context = tasks.attempt_of.enqueue(note="from a process")
        run_after = added.enqueued_at + timedelta(seconds=8)  # past a busy machine's pool start
        later = tasks.add.using(run_after=run_after).enqueue(1, 1)
        assert not Job.objects.filter(state=State.DONE).exists()
    wait_for(
        lambda: tasks.add.get_result(added.id).status == TaskResultStatus.SUCCESSFUL,
        timeout=30,
        message="the task to run once its enqueue committed",
    )
    assert tasks.add.get_result(added.id).return_value == 42
    ran = wait_for(lambda: tasks.attempt_of.get_result(context.id).is_finished, timeout=30)
    assert ran and tasks.attempt_of.get_result(context.id).return_value == {"attempt": 1, "note": "from a process"}
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY, "run_after holds it back"
    wait_for(lambda: tasks.add.get_result(later.id).is_finished, timeout=30, message="the deferred task")
    finished = tasks.add.get_result(later.id)
    assert finished.started_at >= run_after, "not before its run_after"

    # Retried on a transient error (the control process promotes the retry), then it succeeds.
    flaky = tasks.flaky.enqueue(fail_until=2)
    wait_for(lambda: tasks.flaky.get_result(flaky.id).is_finished, timeout=60, message="the flaky task")
    read = tasks.flaky.get_result(flaky.id)
    assert (read.status, read.return_value, read.attempts) == (TaskResultStatus.SUCCESSFUL, "succeeded at attempt 2", 2)
    assert read.errors[0].exception_class is ConnectionError

    # A permanent error: dead at once, in the dead-letter queue, on the console's job page.
    broken = tasks.broken.enqueue("A-17")
    wait_for(lambda: tasks.broken.get_result(broken.id).is_finished, timeout=30, message="the broken task")
    failed = tasks.broken.get_result(broken.id)
    assert failed.status == TaskResultStatus.FAILED and Job.objects.get(pk=broken.id).state == State.DEAD
    assert "order A-17 has no lines" in failed.errors[0].traceback
    admin = get_user_model().objects.create_superuser("root", password="x" * 16)
    client.force_login(admin)
    page = client.get(f"/admin/jobs/job/{broken.id}/change/").content.decode()
    assert "task__tests__support__tasksapp__tasks__broken" in page and "order A-17 has no lines" in page
    from dashboard.operations.deadletters import dead_letter_groups

    # The step comes from the attempt's checked path, which the control process's path check writes
    # within a sweep or two of the job's end (a moment longer while the machine is busy).
    wait_for(
        lambda: Attempt.objects.filter(job_id=broken.id, path_checked=True).exists(),
        timeout=30,
        message="the broken task's path checked",
    )
    groups = dead_letter_groups(now=failed.finished_at + timedelta(seconds=1))
    assert [(g.type, g.error_class, g.step) for g in groups] == [
        ("task__tests__support__tasksapp__tasks__broken", "ValueError", "task")
    ]


def test_the_more_urgent_task_starts_first(tasks_pools):
    from workers.runtime.services import pool_pause, pool_resume

    pool_pause(pool="tasks", actor="test", reason="queue both first")
    bulk = [tasks.bulk.enqueue(f"bulk-{n}") for n in range(5)]
    urgent = tasks.urgent.enqueue("urgent")
    pool_resume(pool="tasks", actor="test", reason="go")
    for result in [*bulk, urgent]:
        wait_for(lambda r=result: r.task.get_result(r.id).is_finished, timeout=30)
    started = {r.id: r.task.get_result(r.id).started_at for r in [*bulk, urgent]}
    assert started[urgent.id] <= min(started[r.id] for r in bulk)


def test_a_task_of_an_app_not_installed_is_enqueued_by_the_web_server_and_run_by_a_pool(tasks_pools, tmp_path):
    """tests/support/myapp is importable but not installed, and its task lives in ``emails.py``: the
    team's view enqueues it in the production web server; the tasks pool, which never imported the
    module, meets its type in a claim, imports it by its path and runs it; the result is read here."""
    port = free_port()
    (tmp_path / "static").mkdir()
    env = child_env(
        LEITSTAND_TEST_URLCONF="tests.support.myapp.urls",
        LEITSTAND_DEBUG="false",
        LEITSTAND_STATIC_ROOT=str(tmp_path / "static"),
        LEITSTAND_ALLOWED_HOSTS="127.0.0.1",
        LEITSTAND_WEB_BIND=f"127.0.0.1:{port}",
        LEITSTAND_WEB_WORKERS="1",
    )
    server = production_server(env)
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/healthz", server, timeout=30)
        answer = httpx.post(f"http://127.0.0.1:{port}/myapp/welcome", data={"address": "grace@example.org"})
        assert answer.status_code == 202, answer.text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=40)
    from tests.support.myapp import emails

    result_id = answer.json()["id"]
    wait_for(lambda: emails.send_welcome.get_result(result_id).is_finished, timeout=30, message="the welcome task")
    result = emails.send_welcome.get_result(result_id)
    assert (result.status, result.attempts) == (TaskResultStatus.SUCCESSFUL, 1), result.errors
    assert result.return_value["subject"] == "Welcome, grace"
    assert result.return_value["pid"] not in (os.getpid(), server.pid)  # a pool's worker ran it
    job = Job.objects.get(pk=result_id)
    assert (job.type, job.pool) == (type_name("tests.support.myapp.emails.send_welcome"), "tasks")


def test_a_payload_naming_a_plain_function_is_refused_by_a_real_pool_and_nothing_runs(tasks_pools, tmp_path):
    marker = tmp_path / "ran"
    path = "tests.support.myapp.emails.helper"
    job = Job.objects.get(pk=tasks.add.enqueue(1, 2).id)
    Job.objects.filter(pk=job.pk).update(
        type=type_name(path), payload={**job.payload, "task": path, "args": [str(marker)]}
    )
    wait_for(lambda: Job.objects.get(pk=job.pk).state == State.DEAD, timeout=30, message="the refusal")
    dead = Job.objects.get(pk=job.pk)
    assert dead.error_class == "jobs.errors.PermanentError" and "is not a task" in dead.error_message
    assert not marker.exists(), "the plain function ran"
