"""Django's Tasks framework on Leitstand's pools: a ``django.tasks`` backend (on Django 5.2 the
django-tasks backport's, the same API) under which a ``@task`` function of any installed app runs
as a job type of its own — leases, fencing, retries by its error classes, paths, the console, the
dead-letter queue and its review (docs/operations.md, "Django tasks").

    TASKS = {"default": {"BACKEND": "workers.runtime.tasks.LeitstandBackend",
                         "QUEUES": ["default", "analysis"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}

- **A job type per task**, registered when the task is defined (``@task`` validates it with its
  backend: the backend registers ``task__<module path, dots as __>``), in every process that
  imports the module; every pool process imports the installed apps' ``tasks`` modules at start
  (``tasks_discover``), so it knows the types it may claim.
- **Queues are pools.** ``queue_name`` names the pool that runs the task: ``default`` is
  ``OPTIONS["DEFAULT_POOL"]`` (the ``tasks`` pool); another must be listed in ``QUEUES`` and be a
  pool a job may be sent to (never ``notify`` or ``control``, whatever ``QUEUES`` lists: such a
  backend refuses to start), or the task is refused when it is defined.
- **Priorities are lanes**: Django's −100 … 100 (larger first) onto the lanes 0 … 9 (smaller first):
  ``5 − round(priority / 20)``, clamped — 0 is lane 5 (the default), 100 lane 0, −80 and below lane 9.
- **run_after** is the job's due time; arguments are JSON-round-tripped when enqueued (what cannot
  be raises the JSON encoder's ``TypeError`` then, as Django's own backends do, not when it runs).
- **Signals** as Django sends them: ``task_enqueued`` in the enqueuing process once the job exists
  (in the caller's transaction), ``task_started`` in the worker before the function runs (status
  RUNNING, its attempt's worker among ``worker_ids``), ``task_finished`` after every attempt (status
  SUCCESSFUL with the return value, or FAILED with the attempt's error; a failed attempt that will be
  retried is READY again when read back). The sender is the backend's class.
- **Enqueued in the caller's transaction**: the job commits with it, so workers see it only once it
  committed and never when it rolled back — the on-commit behaviour, atomic. (``ENQUEUE_ON_COMMIT``
  False, a job outside its caller's transaction, would need a second connection: refused.)
- **Results**: ``get_result`` maps the job's state onto ``TaskResultStatus``: planned, held,
  reserved and failed (waiting for its retry) are READY; running RUNNING; done SUCCESSFUL; dead and
  cancelled FAILED. Each failed attempt is a ``TaskError`` with its exception class and traceback
  (kept on the attempt's log lines); the return value is recorded once, in the effect ledger.
- **takes_context**: the task gets a ``TaskContext`` whose ``attempt`` is the job's attempt.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules, import_string

try:  # Django 6.0 and later
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2: the backport of the same framework
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

from jobs.errors import PermanentError
from jobs.models import Attempt, Effect, Job, State
from jobs.retry import RetryPolicy
from workers.runtime import options
from workers.runtime.context import Done, JobContext
from workers.runtime.registry import JobType, registry
from workers.runtime.services import job_submit

logger = logging.getLogger("leitstand.tasks")

TYPE_PREFIX = "task__"
TYPE_LENGTH = 64  # Job.type
DEFAULT_QUEUE = "default"

# Leitstand's states onto Django's statuses (the folds are in the module's docstring).
STATUS = {
    State.PLANNED: TaskResultStatus.READY,
    State.HELD: TaskResultStatus.READY,
    State.RESERVED: TaskResultStatus.READY,
    State.FAILED: TaskResultStatus.READY,
    State.RUNNING: TaskResultStatus.RUNNING,
    State.RESULT_STORED: TaskResultStatus.SUCCESSFUL,
    State.DONE: TaskResultStatus.SUCCESSFUL,
    State.DEAD: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
}

# The backend's OPTIONS. A task's timeout, lease and heartbeat are the synthetic jobs' timing family
# (LEITSTAND_SYNTHETIC): short jobs of the application's own, checked like every type's at start-up.
_DEFAULTS = {
    "DEFAULT_POOL": "tasks",
    "MAX_ATTEMPTS": 3,
    "RETRY_BASE_SECONDS": 2.0,
    "RETRY_CAP_SECONDS": 600.0,
    "ENQUEUE_ON_COMMIT": True,
}


def type_name(module_path: str) -> str:
    """The job type of a task: ``tests.tasksapp.tasks.add`` is ``task__tests__tasksapp__tasks__add``."""
    return TYPE_PREFIX + module_path.replace(".", "__")


def lane(priority: int) -> int:
    """Django's task priority (−100 … 100, larger first) as a Leitstand lane (0 … 9, smaller first)."""
    return min(9, max(0, 5 - round(priority / 20)))


# Pools no task may name, whatever QUEUES lists: a task there could hold back every alert and webhook.
SYSTEM_POOLS = frozenset({"notify", "control"})


class LeitstandBackend(BaseTaskBackend):
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = False

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(_DEFAULTS))
        if unknown:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS'] names unknown options: {', '.join(unknown)}")
        self.settings = {**_DEFAULTS, **self.options}
        system = sorted(SYSTEM_POOLS & {self.pool(queue) for queue in self.queues or ()})
        if system:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['QUEUES'] names {', '.join(system)}: a pool of the system's own work (alerts "
                "and webhook deliveries, the control process) never runs a task, whatever the settings say"
            )
        # Django's documentation has it beside QUEUES; OPTIONS is read too.
        if not params.get("ENQUEUE_ON_COMMIT", self.settings["ENQUEUE_ON_COMMIT"]):
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]: ENQUEUE_ON_COMMIT False is not supported: a task's job is created in the "
                "caller's transaction and commits with it"
            )

    def pool(self, queue_name: str) -> str:
        return self.settings["DEFAULT_POOL"] if queue_name == DEFAULT_QUEUE else queue_name

    def validate_task(self, task) -> None:
        super().validate_task(task)
        name = type_name(task.module_path)
        if len(name) > TYPE_LENGTH:
            raise InvalidTaskError(f"the task's job type {name!r} is longer than {TYPE_LENGTH} characters")
        if self.pool(task.queue_name) in SYSTEM_POOLS:
            raise InvalidTaskError(f"queue {task.queue_name!r}: a pool of the system's own work never runs a task")
        if refusal := options.current().pool_refusal(self.pool(task.queue_name)):
            raise InvalidTaskError(f"queue {task.queue_name!r}: {refusal}")
        self._register(task, name)

    def _register(self, task, name: str) -> None:
        if registry.known(name):
            return  # the same function with other defaults (Task.using), or imported again
        doc = (task.func.__doc__ or "").strip().splitlines()
        timing = options.current().synthetic
        registry.register(
            JobType(
                name=name,
                description=f"Django task {task.module_path}" + (f": {doc[0]}" if doc else ""),
                handler=task_run,
                pool=self.pool(task.queue_name),
                may_choose_pool=True,  # its queue_name chooses (Task.using may name another)
                timeout_seconds=timing.timeout_seconds,
                lease_seconds=timing.lease_seconds,
                heartbeat_seconds=timing.heartbeat_seconds,
                retry=RetryPolicy(
                    base_seconds=float(self.settings["RETRY_BASE_SECONDS"]),
                    cap_seconds=float(self.settings["RETRY_CAP_SECONDS"]),
                    max_attempts=int(self.settings["MAX_ATTEMPTS"]),
                ),
                processing_version="task@1",
                expected_paths=("task",),
                default_priority=lane(task.priority),
                log_info_lines=10,
            )
        )

    def enqueue(self, task, args, kwargs) -> TaskResult:
        self.validate_task(task)
        # What JSON cannot hold raises the encoder's TypeError here, before a job exists.
        arguments = json.loads(json.dumps({"args": list(args), "kwargs": dict(kwargs)}, allow_nan=False))
        pool = self.pool(task.queue_name)
        with transaction.atomic():
            submission = job_submit(
                job_type=type_name(task.module_path),
                payload={"pool": pool, "task": task.module_path, "backend": self.alias, **arguments},
                idempotency_key=_new_key(),
                actor=f"task:{self.alias}",
                priority=lane(task.priority),
                due_at=task.run_after,
            )
            result = self._result(submission.job)
            task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        job = Job.objects.filter(pk=_as_id(result_id), type__startswith=TYPE_PREFIX).first()
        if job is None or job.payload.get("backend") != self.alias:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job)

    def _result(self, job: Job) -> TaskResult:
        task = _task_of(job.payload["task"])
        attempts = list(Attempt.objects.filter(job=job).order_by("lease_version"))
        started = [a.started_at for a in attempts if a.started_at]
        status = STATUS.get(job.state, TaskResultStatus.FAILED)
        result = TaskResult(
            task=task,
            id=str(job.pk),
            status=status,
            enqueued_at=job.created_at,
            started_at=started[0] if started else None,
            finished_at=job.finished_at if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED) else None,
            last_attempted_at=started[-1] if started else None,
            args=job.payload.get("args", []),
            kwargs=job.payload.get("kwargs", {}),
            backend=self.alias,
            errors=[_error(a) for a in attempts if a.outcome in _FAILED_OUTCOMES],
            worker_ids=[a.lease_owner for a in attempts],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            recorded = Effect.objects.filter(key=_return_key(job.pk)).values_list("result", flat=True).first()
            object.__setattr__(result, "_return_value", (recorded or {}).get("value"))
        return result


_FAILED_OUTCOMES = (Attempt.Outcome.FAILED, Attempt.Outcome.DEAD)


def tasks_discover(backends: dict) -> None:
    """Import every installed app's ``tasks`` module, so this process knows every task's job type
    (a pool process, before it claims): where ``backends`` (the TASKS setting) names this backend."""
    if any(config.get("BACKEND") == f"{__name__}.LeitstandBackend" for config in backends.values()):
        autodiscover_modules("tasks")


def task_run(context: JobContext):
    """The handler of every task's job type: the function with the job's arguments (and a
    ``TaskContext`` when it takes one); its return value recorded once; an exception logged with its
    traceback (kept on the attempt) and raised again for the engine to classify."""
    payload = context.payload
    path = payload.get("task", "")
    if not isinstance(path, str) or type_name(path) != context.job_type:
        # Only the task its type was registered for: a payload cannot send the handler elsewhere.
        raise PermanentError(f"the payload names task {path!r}, not the one of job type {context.job_type}")
    task = _task_of(path)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PermanentError("the payload's args must be a list and its kwargs an object")
    backend = task.get_backend()
    result = _running(backend._result(Job.objects.get(pk=context.job_id)))
    task_started.send(type(backend), task_result=result)
    with context.step("task"):
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        except Exception as raised:
            logger.exception("task %s raised", task.module_path)  # its traceback kept on the attempt
            _finished(backend, result, raised=raised)
            raise
    try:
        value = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as refused:
        error = PermanentError(f"the task's return value is not JSON: {refused}")
        _finished(backend, result, raised=error)
        raise error from None
    context.effect(_return_key(context.job_id), lambda: {"value": value}, kind="task_return")
    _finished(backend, result, value=value)
    return Done(reason=f"task {task.module_path} returned")


def _running(result: TaskResult) -> TaskResult:
    """The result as its attempt starts: RUNNING (its attempt, claimed, already names its worker in
    ``worker_ids``)."""
    now = timezone.now()
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    object.__setattr__(result, "started_at", result.started_at or now)
    object.__setattr__(result, "last_attempted_at", now)
    return result


def _finished(backend, result: TaskResult, *, value=None, raised: BaseException | None = None) -> None:
    """``task_finished`` for this attempt: SUCCESSFUL with its return value, or FAILED with its error."""
    object.__setattr__(result, "finished_at", timezone.now())
    if raised is None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        result.errors.append(
            TaskError(
                exception_class_path=f"{type(raised).__module__}.{type(raised).__qualname__}",
                traceback="".join(traceback.format_exception(raised)),
            )
        )
    task_finished.send(type(backend), task_result=result)


def _task_of(module_path: str):
    try:
        task = import_string(module_path)
    except ImportError:
        raise PermanentError(f"no task {module_path!r} can be imported here") from None
    if not hasattr(task, "module_path") or not hasattr(task, "call"):
        raise PermanentError(f"{module_path!r} is not a task (decorate it with @task)")
    return task


def _error(attempt: Attempt) -> TaskError:
    """A failed attempt as Django's ``TaskError``: its exception's class (builtins named as such) and
    the traceback its attempt kept (its last 8,000 characters; the message where none was kept)."""
    path = attempt.error_class if "." in attempt.error_class else f"builtins.{attempt.error_class}"
    kept = [line["exception"] for line in (attempt.log_lines or {}).get("lines", []) if line.get("exception")]
    return TaskError(exception_class_path=path, traceback=kept[-1] if kept else attempt.error_message)


def _return_key(job_id) -> str:
    return f"task-return:{job_id}"


def _new_key() -> str:
    return f"task-{uuid.uuid4().hex}"


def _as_id(result_id: str) -> Any:
    try:
        return uuid.UUID(str(result_id))
    except ValueError:
        return None
