"""Django's own Tasks contract (tests/tasks/ in Django; tests/tests/ in the django-tasks backport) run
against LeitstandBackend on a real ``tasks`` pool and the control process, test by test under Django's
names. The tasks are Django's (tests/support/tasksapp/contract.py), outside any ``tasks`` module: a pool
meets each only by its module path, when it claims its job.

Adapted to a queued backend: where the immediate backend runs a task inside ``enqueue``, these enqueue,
wait (at most 30 s) for the pool to finish it and read it back (``refresh()``, ``get_result``); where
the dummy backend keeps a result READY, these read it inside the enqueuing transaction, which no pool
can see yet. Log lines: the enqueuing process's are captured here; the worker's are the ones its
attempt kept (``Attempt.log_lines``, as the job page shows them). The queue Django's tests call
``queue_1`` is ``synthetic`` here (a queue is a pool: config/test_settings.py). Results are compared
field by field (``dataclasses.asdict``), not with TaskResult's equality.

Left out, and why:

- test_throws_keyboard_interrupt: the immediate backend lets a KeyboardInterrupt escape ``enqueue``;
  a queued task raises nothing into its caller (in a worker it is a signal to that process).
- test_cannot_get_result, test_cannot_refresh_result, test_cannot_pass_run_after,
  test_doesnt_wait_until_transaction_commit_by_default: the immediate backend's limits; this backend
  reads results, defers and enqueues in the caller's transaction (test_waits_until_transaction_commit).
- test_pickle_task, test_pickle_task_result, test_unpickle_*: Task pickling (Django main, not 0.12),
  nothing a backend decides; jobs carry a task's module path.
- test_task_result_equality*, test_task_result_hash_*, test_task_result_lt_*,
  test_task_result_comparability_in_priority_queue: TaskResult's own dataclass methods, which differ
  between the backport and Django main; fields are compared here instead.
- test_using_unknown_backend, test_using_missing_backend, test_no_backends, test_get_backend,
  test_task_decorator, test_name, test_call_task*, test_call_async_task*, test_using_creates_new_instance,
  test_task_error_invalid_exception, test_task_error_unknown_module, test_run_after_in_decorator: the
  framework's code alone (backend handler, Task, TaskError), whatever the backend.
- test_unknown_queue_name's second half (QUEUES [] lets any queue name pass): here a queue is a pool,
  so a name that is no pool is refused whatever QUEUES says; the first half is ported.
- test_meaning_of_life_view, test_get_result_from_different_request: the views of Django's test
  project; reading a result in another process is what every test here does.
- test_clear, test_errors, and the dummy backend's ``results`` list: the dummy backend's own store.
"""

import dataclasses
import logging
import re
import time
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.module_loading import import_string

from jobs.models import Attempt, Job
from tests.support.pools import wait_for
from tests.support.tasksapp import contract
from workers.runtime.tasks import (
    InvalidTaskError,
    LeitstandBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    lane,
    type_name,
)

try:  # Django 6.0 and later
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task, task_backends
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
    from django.tasks.exceptions import TaskResultMismatch

    LOGGER = "django.tasks"
except ImportError:  # Django 5.2: the backport
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task, task_backends
    from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
    from django_tasks.exceptions import TaskResultMismatch

    LOGGER = "django_tasks"

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

WAIT = 30  # seconds: the longest any one wait here may take
PRIORITY_REFUSED = re.escape(f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}")


def finished(tasks_pools, result, timeout: float = WAIT):
    """Wait for the pool to finish ``result``'s task, then read it again (``refresh``)."""
    wait_for(
        lambda: tasks_pools.check_running() and result.task.get_result(result.id).is_finished,
        timeout=timeout,
        message=f"task {result.task.module_path} ({result.id}) to finish",
    )
    result.refresh()
    return result


def assert_ran(result) -> None:
    """What Django checks of every task that ran: its times, in order, and who ran it."""
    assert None not in (result.enqueued_at, result.started_at, result.last_attempted_at, result.finished_at)
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    assert result.worker_ids and all(result.worker_ids), result.worker_ids


def worker_lines(result, level: str | None = None) -> list[dict]:
    """The lines Django's logger wrote in the worker during the last attempt (kept on it)."""
    attempt = Attempt.objects.filter(job_id=result.id).order_by("lease_version").last()
    assert attempt is not None, "no attempt"
    lines = (attempt.log_lines or {}).get("lines", [])
    return [line for line in lines if line["logger"] == LOGGER and (level is None or line["level"] == level)]


def text(line: dict) -> str:
    return line["message"] + "\n" + line.get("exception", "")


def fields(result) -> dict:
    return dataclasses.asdict(result)


def jobs_of(task) -> int:
    return Job.objects.filter(type=type_name(task.module_path)).count()


# --- the backend and its validation (no pool needed) -----------------------------------------------


def test_using_correct_backend():
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], LeitstandBackend)
    assert default_task_backend.alias == "default"
    assert default_task_backend.options == settings.TASKS["default"].get("OPTIONS", {})


def test_check():
    errors = list(default_task_backend.check())
    assert errors == []


def test_using_priority():
    assert contract.noop_task.priority == 0
    assert contract.noop_task.using(priority=1).priority == 1
    assert contract.noop_task.priority == 0
    job = Job.objects.get(pk=contract.noop_task.using(priority=1).enqueue().id)
    assert job.priority == lane(1)


def test_using_queue_name(tasks_pools):
    assert contract.noop_task.queue_name == DEFAULT_TASK_QUEUE_NAME
    assert contract.noop_task.using(queue_name="synthetic").queue_name == "synthetic"
    assert contract.noop_task.queue_name == DEFAULT_TASK_QUEUE_NAME
    # A queue is a pool: the tasks pool runs the default queue's task, never the synthetic queue's.
    with transaction.atomic():
        other = contract.noop_task.using(queue_name="synthetic").enqueue()
        default = contract.noop_task.enqueue()
    assert Job.objects.get(pk=other.id).pool == "synthetic"
    finished(tasks_pools, default)
    assert default.status == TaskResultStatus.SUCCESSFUL
    other.refresh()
    assert (other.status, other.worker_ids) == (TaskResultStatus.READY, [])


def test_naive_datetime():
    with pytest.raises(InvalidTaskError, match="run_after must be an aware datetime"):
        contract.noop_task.using(run_after=datetime.now())


def test_invalid_priority():
    for priority in (-101, 101, 3.1):
        with pytest.raises(InvalidTaskError, match=PRIORITY_REFUSED):
            contract.noop_task.using(priority=priority)
    # The bounds and the default are valid, and each has its lane.
    lanes = {p: Job.objects.get(pk=contract.noop_task.using(priority=p).enqueue().id).priority for p in (100, -100, 0)}
    assert lanes == {100: 0, -100: 9, 0: 5}


def test_unknown_queue_name():
    with pytest.raises(InvalidTaskError, match="Queue 'queue-2' is not valid for backend"):
        contract.noop_task.using(queue_name="queue-2")


def test_invalid_function():
    def local_function() -> None:
        return None

    for invalid_function in (any, local_function):
        with pytest.raises(InvalidTaskError, match="Task function must be defined at a module level"):
            task()(invalid_function)


def test_takes_context_without_taking_context():
    with pytest.raises(InvalidTaskError, match="Task takes context but does not have a first argument of 'context'"):
        task(takes_context=True)(contract.calculate_meaning_of_life.func)


def test_validate_disallowed_async_task():
    assert default_task_backend.supports_async_task is False
    with pytest.raises(InvalidTaskError, match="(?i)Backend does not support async tasks"):
        task()(contract.noop_task_async)


def test_enqueue_with_invalid_argument():
    with pytest.raises(TypeError, match="Unsupported type"):
        contract.noop_task.enqueue(datetime.now())
    assert jobs_of(contract.noop_task) == 0


def test_aenqueue_with_invalid_argument():
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(contract.noop_task.aenqueue)(datetime.now())
    assert jobs_of(contract.noop_task) == 0


def queue_1_only():
    """The settings with the default queue only: a task made for ``synthetic`` is invalid on enqueue."""
    config = settings.TASKS["default"]
    return override_settings(TASKS={"default": {**config, "QUEUES": ["default"]}})


def test_validate_on_enqueue():
    with pytest.raises(InvalidTaskError, match="Queue 'unknown_queue' is not valid for backend"):
        contract.noop_task.using(queue_name="unknown_queue")
    # Validated again when enqueued: valid when it was made, no longer under these settings.
    made = contract.noop_task.using(queue_name="synthetic")
    with queue_1_only(), pytest.raises(InvalidTaskError, match="Queue 'synthetic' is not valid for backend"):
        made.enqueue()
    assert jobs_of(contract.noop_task) == 0


def test_validate_on_aenqueue():
    made = contract.noop_task.using(queue_name="synthetic")
    with queue_1_only(), pytest.raises(InvalidTaskError, match="Queue 'synthetic' is not valid for backend"):
        async_to_sync(made.aenqueue)()
    assert jobs_of(contract.noop_task) == 0


def test_get_missing_result():
    with pytest.raises(TaskResultDoesNotExist):
        contract.noop_task.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(contract.noop_task.aget_result)("123")


def test_get_incorrect_result():
    result = default_task_backend.enqueue(contract.calculate_meaning_of_life, (), {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        contract.noop_task.get_result(result.id)


def test_get_incorrect_result_async():
    result = async_to_sync(default_task_backend.aenqueue)(contract.calculate_meaning_of_life, (), {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        async_to_sync(contract.noop_task.aget_result)(result.id)


# --- enqueued, not run yet (the dummy backend's checks, inside the enqueuing transaction) -----------


def assert_ready(result, args, kwargs) -> None:
    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    assert result.enqueued_at is not None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert (result.task, result.args, result.kwargs, result.attempts, result.errors) == (
        contract.noop_task,
        args,
        kwargs,
        0,
        [],
    )


def test_enqueue_task_ready_before_it_runs():
    with transaction.atomic():  # no pool sees it: READY, whatever the pool does
        result = contract.noop_task.enqueue(1, two=3)
        assert_ready(result, [1], {"two": 3})
        assert_ready(contract.noop_task.get_result(result.id), [1], {"two": 3})
        queued = async_to_sync(contract.noop_task.aenqueue)()
        assert_ready(queued, [], {})
        assert_ready(async_to_sync(contract.noop_task.aget_result)(queued.id), [], {})
        transaction.set_rollback(True)


def test_refresh_result(tasks_pools):
    with transaction.atomic():
        result = contract.calculate_meaning_of_life.enqueue()
        original = fields(result)
        result.refresh()
        assert fields(result) == original
        async_to_sync(result.arefresh)()
        assert fields(result) == original
    assert result.status == TaskResultStatus.READY
    finished(tasks_pools, result)  # refresh() reads the finished task
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_refresh_result_async(tasks_pools):
    result = async_to_sync(default_task_backend.aenqueue)(contract.calculate_meaning_of_life, (), {})
    wait_for(lambda: contract.calculate_meaning_of_life.get_result(result.id).is_finished, timeout=WAIT)
    assert result.status == TaskResultStatus.READY
    async_to_sync(result.arefresh)()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert_ran(result)


def test_get_result(tasks_pools):
    with transaction.atomic():
        result = default_task_backend.enqueue(contract.noop_task, (), {})
        assert fields(contract.noop_task.get_result(result.id)) == fields(result)
    finished(tasks_pools, result)
    assert fields(contract.noop_task.get_result(result.id)) == fields(result)
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_get_result_async(tasks_pools):
    with transaction.atomic():
        result = async_to_sync(default_task_backend.aenqueue)(contract.noop_task, (), {})
        assert fields(async_to_sync(contract.noop_task.aget_result)(result.id)) == fields(result)
    finished(tasks_pools, result)
    assert fields(async_to_sync(contract.noop_task.aget_result)(result.id)) == fields(result)
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_waits_until_transaction_commit(tasks_pools):
    with transaction.atomic():
        result = contract.noop_task.enqueue()
        assert result.enqueued_at is not None and result.status == TaskResultStatus.READY
        time.sleep(1.5)  # the pool polls every 0.05 s: it would have claimed a job it could see
        assert not Attempt.objects.filter(job_id=result.id).exists(), "a pool ran it before the commit"
        assert contract.noop_task.get_result(result.id).status == TaskResultStatus.READY
    finished(tasks_pools, result)
    assert result.status == TaskResultStatus.SUCCESSFUL

    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = contract.noop_task.enqueue()
        raise RuntimeError("the caller's change fails")
    with pytest.raises(TaskResultDoesNotExist):
        contract.noop_task.get_result(rolled_back.id)
    assert not Job.objects.filter(pk=rolled_back.id).exists()


# --- run by the pool (the immediate backend's checks, once it finished) -----------------------------


def test_module_path(tasks_pools):
    """The pool runs a task it has met by its module path only (contract.py is no ``tasks`` module)."""
    assert contract.noop_task.module_path == "tests.support.tasksapp.contract.noop_task"
    assert import_string(contract.noop_task.module_path) is contract.noop_task
    result = contract.noop_task.enqueue()
    assert Job.objects.get(pk=result.id).payload["task"] == contract.noop_task.module_path
    finished(tasks_pools, result)
    assert (result.status, result.errors) == (TaskResultStatus.SUCCESSFUL, [])


def test_enqueue_task(tasks_pools):
    for each in (contract.noop_task, contract.noop_task_from_bare_decorator):
        result = finished(tasks_pools, each.enqueue(1, two=3))
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
        assert result.is_finished is True
        assert_ran(result)
        assert result.return_value is None
        assert (result.task, result.args, result.kwargs, result.attempts) == (each, [1], {"two": 3}, 1)


def test_enqueue_task_async(tasks_pools):
    result = finished(tasks_pools, async_to_sync(contract.noop_task.aenqueue)())
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.is_finished is True
    assert_ran(result)
    assert result.return_value is None
    assert (result.task, result.args, result.kwargs, result.attempts) == (contract.noop_task, [], {}, 1)


@pytest.mark.parametrize(
    ("failing", "exception", "message"),
    [
        (contract.failing_task_value_error, ValueError, "This task failed due to ValueError"),
        (contract.failing_task_system_exit, SystemExit, "This task failed due to SystemExit"),
    ],
    ids=["ValueError", "SystemExit"],
)
def test_catches_exception(tasks_pools, failing, exception, message):
    result = finished(tasks_pools, failing.enqueue())
    errors = worker_lines(result, "ERROR")
    assert len(errors) == 1, errors
    assert message in text(errors[0])

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert result.is_finished is True
    assert_ran(result)
    assert result.errors[0].exception_class_path == f"builtins.{exception.__name__}"
    assert result.errors[0].exception_class is exception
    traceback = result.errors[0].traceback
    assert traceback and traceback.endswith(f"{exception.__name__}: {message}\n"), traceback
    assert traceback.startswith("Traceback (most recent call last):"), traceback
    assert (result.task, result.args, result.kwargs) == (failing, [], {})


def test_complex_exception(tasks_pools):
    result = finished(tasks_pools, contract.complex_exception.enqueue())
    assert worker_lines(result, "ERROR")
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert_ran(result)
    assert result._return_value is None
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback
    assert (result.task, result.args, result.kwargs) == (contract.complex_exception, [], {})


def test_complex_return_value(tasks_pools):
    result = finished(tasks_pools, contract.complex_return_value.enqueue())
    assert worker_lines(result, "ERROR")
    assert result.status == TaskResultStatus.FAILED
    assert_ran(result)
    assert result._return_value is None
    assert result.errors[0].exception_class_path == "builtins.TypeError"
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_result(tasks_pools):
    result = finished(tasks_pools, default_task_backend.enqueue(contract.calculate_meaning_of_life, [], {}))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_result_async(tasks_pools):
    result = finished(
        tasks_pools, async_to_sync(default_task_backend.aenqueue)(contract.calculate_meaning_of_life, [], {})
    )
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_enqueue_logs(tasks_pools, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = contract.noop_task.enqueue()
    here = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(here) == 1, here
    assert "enqueued" in here[0] and result.id in here[0]

    finished(tasks_pools, result)
    there = [line["message"] for line in worker_lines(result)]
    assert len(there) == 2, there  # with the enqueuing process's line, Django's three
    assert "state=RUNNING" in there[0] and result.id in there[0]
    assert "state=SUCCESSFUL" in there[1] and result.id in there[1]


def test_failed_logs(tasks_pools, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = contract.failing_task_value_error.enqueue()
    here = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(here) == 1 and "enqueued" in here[0], here

    finished(tasks_pools, result)
    there = worker_lines(result)
    assert len(there) == 2, there
    assert "state=RUNNING" in there[0]["message"] and result.id in there[0]["message"]
    assert "state=FAILED" in there[1]["message"] and result.id in there[1]["message"]
    assert there[1]["level"] == "ERROR"


def test_successful_task_no_none_type_in_logs(tasks_pools, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = finished(tasks_pools, contract.noop_task.enqueue())
    assert result.status == TaskResultStatus.SUCCESSFUL
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER] + [text(x) for x in worker_lines(result)]
    assert any("state=SUCCESSFUL" in line for line in lines), lines
    for line in lines:
        assert "NoneType" not in line


def test_takes_context(tasks_pools):
    result = finished(tasks_pools, contract.get_task_id.enqueue())
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == result.id


def test_context(tasks_pools):
    result = finished(tasks_pools, contract.test_context.enqueue(1))
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors


def test_using_run_after(tasks_pools):
    now = timezone.now()
    assert contract.noop_task.run_after is None
    assert contract.noop_task.using(run_after=now).run_after == now
    assert contract.noop_task.run_after is None
    # Queued: not run before it.
    later = now + timedelta(seconds=2)
    result = contract.noop_task.using(run_after=later).enqueue()
    assert Job.objects.get(pk=result.id).due_at == later
    finished(tasks_pools, result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.started_at >= later


def test_chained_using(tasks_pools):
    now = timezone.now()
    run_after_task = contract.noop_task.using(run_after=now)
    assert run_after_task.run_after == now
    priority_task = run_after_task.using(priority=10)
    assert (priority_task.priority, priority_task.run_after) == (10, now)
    assert run_after_task.priority == 0
    # Both settings reach the job.
    result = priority_task.enqueue()
    job = Job.objects.get(pk=result.id)
    assert (job.due_at, job.priority) == (now, lane(10))
    assert finished(tasks_pools, result).status == TaskResultStatus.SUCCESSFUL
