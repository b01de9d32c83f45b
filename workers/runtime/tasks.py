"""Django's Tasks framework on Leitstand's pools: a ``django.tasks`` backend (on Django 5.2 the
django-tasks backport's, the same API) under which a ``@task`` function of any installed app runs
as a job type of its own — leases, fencing, retries by its error classes, paths, the console, the
dead-letter queue and its review (docs/operations.md, "Django tasks").

    TASKS = {"default": {"BACKEND": "workers.runtime.tasks.LeitstandBackend",
                         "QUEUES": ["default", "analysis"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}

- **A job type per task**, registered when the task is defined (``@task`` validates it with its
  backend: the backend registers ``task__<module path, dots as __>``), in every process that
  imports the module. Every pool process imports the installed apps' ``tasks`` modules at start
  (``tasks_discover``); a task anywhere else (``myapp/emails.py``) is met by its path: a pool that
  claims a job of a task type it does not know imports the module its job names (``task_resolve``) —
  only under an installed app or a package ``OPTIONS["MODULES"]`` lists (``LEITSTAND_TASK_MODULES``:
  an app that is importable but not installed), never the standard library or a dunder name (``__main__``) — and
  runs only a ``Task`` of the job's backend whose own module path is exactly the recorded one.
  A module that cannot be imported here is a deployment's error, not the task's: the job is deferred
  (``TaskNotImportable``, no retry used) and tried again after ``IMPORT_RETRY_SECONDS`` on whichever
  host takes it, so deploying the module is all it takes; past the deferred jobs' useful life
  (``LEITSTAND_DEFERRED_LIFE_HOURS``) it ends dead with that class. Each path's import error is
  logged once per process.
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

import builtins
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
import uuid
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

try:  # Django 6.0 and later
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2: the backport of the same framework
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

from jobs.errors import Deferred, PermanentError
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
    # How long a job whose task's module cannot be imported here waits before it is tried again.
    "IMPORT_RETRY_SECONDS": 60.0,
    # Packages whose modules may hold tasks besides the installed apps' (a pool imports no other).
    "MODULES": (),
}
MAX_PATH_CHARS = 300
_MISSING = object()
HASH_DIGITS = 12


class TaskNotImportable(Deferred):
    """A task's module cannot be imported in this process (not deployed on this host yet, or it fails
    when imported): a deployment's error, so its job waits for a host that has it, using no retry; past
    the deferred jobs' useful life its job ends dead with this class."""

    past_life_class = None  # it ends as itself: workers.runtime.tasks.TaskNotImportable


def type_name(module_path: str) -> str:
    """The job type of a task: ``tests.tasksapp.tasks.add`` is ``task__tests__tasksapp__tasks__add``; a
    path too long for a job type keeps its start and ends in 12 hex digits of the path's SHA-256."""
    name = TYPE_PREFIX + module_path.replace(".", "__")
    if len(name) <= TYPE_LENGTH:
        return name
    digest = hashlib.sha256(module_path.encode()).hexdigest()[:HASH_DIGITS]
    return f"{name[: TYPE_LENGTH - HASH_DIGITS - 1]}_{digest}"


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
        if not all(part.isidentifier() for part in task.module_path.split(".")):
            raise InvalidTaskError(f"{task.module_path!r} is not an import path: a pool could not import the task")
        if _registered_paths.setdefault(name, task.module_path) != task.module_path:
            raise InvalidTaskError(
                f"task {task.module_path!r} would be job type {name!r}, which is task "
                f"{_registered_paths[name]!r}'s: rename one of them"
            )
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
        # What JSON cannot hold raises TypeError here (Django's normalize_json, as its own backends do;
        # a NaN the encoder's ValueError), before a job exists.
        arguments = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        json.dumps(arguments, allow_nan=False)
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
            result = self._result(submission.job, task)
            task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        job = Job.objects.filter(pk=_as_id(result_id), type__startswith=TYPE_PREFIX).first()
        if job is None or not isinstance(job.payload, dict) or job.payload.get("backend") != self.alias:
            raise TaskResultDoesNotExist(result_id)
        path = _path_of(job)
        try:
            # Every check a pool makes before it imports (a job row could name anything).
            task = _task_checked(path, self.alias) if path is not None else None
        except (PermanentError, TaskNotImportable) as unreadable:
            raise TaskResultDoesNotExist(f"{result_id}: {unreadable}") from None
        if task is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job, task)

    def _result(self, job: Job, task) -> TaskResult:
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
# Job type → the task path that registered it in this process: two paths whose types collide (``a.b__c``
# and ``a__b.c``) are refused when the second is defined.
_registered_paths: dict[str, str] = {}
# The paths whose import error this process has logged (once each, with its traceback; at most
# MAX_LOGGED_PATHS: the paths come from job rows), and the modules that failed to import, with until
# when that answer stands (monotonic) and why.
MAX_LOGGED_PATHS = 1000
_import_logged: set[str] = set()
_import_logged_lock = threading.Lock()
_import_failed: dict[str, tuple[float, str]] = {}


def _path_of(job: Job) -> str | None:
    """The task path a job names, if it is the one its type was named for."""
    path = job.payload.get("task") if isinstance(job.payload, dict) else None
    return path if isinstance(path, str) and type_name(path) == job.type else None


def task_resolve(name: str, payload: dict, pool: str) -> None:
    """Make the task type ``name`` known in this process (the registry's resolver for ``task__``
    types, asked by a pool that claimed a job of a type it has not met): find the task the job's
    payload names (``_task_checked``) — defining it registered its type. Refused (PermanentError: the
    job ends dead, nothing run) when the payload names a path its type was not named for, or the job
    sits in a pool its backend never sends tasks to; deferred (TaskNotImportable) when the module cannot
    be imported here."""
    path = payload.get("task")
    if not isinstance(path, str) or type_name(path) != name:
        raise PermanentError(f"the payload names task {str(path)[:MAX_PATH_CHARS]!r}, not the one of job type {name}")
    alias = payload.get("backend")
    backend = _backend(alias) if isinstance(alias, str) else None
    if not isinstance(backend, LeitstandBackend):
        raise PermanentError(f"the payload names backend {alias!r:.100}, which is not a Leitstand tasks backend here")
    if pool in SYSTEM_POOLS or pool not in {backend.pool(queue) for queue in (DEFAULT_QUEUE, *(backend.queues or ()))}:
        raise PermanentError(f"pool {pool!r} runs no task of backend {alias!r}")
    found = _task_checked(path, alias)
    if not registry.known(name):
        backend.validate_task(found)  # registers its type (refuses what its backend refuses)


def _task_checked(path: str, alias: str):
    """The ``Task`` at ``path`` of backend ``alias``, found only where tasks may live: under an installed
    app or a package the backend's ``MODULES`` lists, never Python's standard library, no dunder name
    (``__main__``, ``__init__``: modules that act when imported; ``_private`` names are fine). Importing it
    defines it: a pool and ``get_result`` alike. PermanentError for what can never be a task of this
    backend; TaskNotImportable when the module cannot be imported here (remembered for
    ``IMPORT_RETRY_SECONDS``, so a broken module is not imported again on every claim)."""
    shown = repr(path[:MAX_PATH_CHARS])
    parts = path.split(".")
    if len(path) > MAX_PATH_CHARS or len(parts) < 2 or not all(p.isidentifier() and not _dunder(p) for p in parts):
        raise PermanentError(f"{shown} is not a task's import path")
    backend = _backend(alias) if isinstance(alias, str) else None
    if not isinstance(backend, LeitstandBackend):
        raise PermanentError(f"backend {alias!r:.100} is not a Leitstand tasks backend here")
    if not _in_task_packages(path, backend.settings["MODULES"]) or _in_standard_library(parts[0]):
        raise PermanentError(f"{shown} is not under an installed app or LEITSTAND_TASK_MODULES: no task is read there")
    module_name, attribute = path.rpartition(".")[::2]
    retry = float(backend.settings["IMPORT_RETRY_SECONDS"])
    failed = _import_failed.get(module_name)
    if failed is not None and time.monotonic() < failed[0]:
        raise TaskNotImportable(failed[1], retry)
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # whatever the module raises: not deployed here, or broken
        message = f"task {shown} cannot be imported here: {type(error).__name__}: {str(error)[:300]}"
        _import_log(path, error)
        _import_failed[module_name] = (time.monotonic() + retry, message)
        raise TaskNotImportable(message, retry) from None
    found = getattr(module, attribute, _MISSING)
    if found is _MISSING:  # the module imports but has no such name: an older release of it here
        raise TaskNotImportable(f"task {shown} cannot be imported here: {module_name} has no {attribute!r}", retry)
    if not isinstance(found, Task) or found.module_path != path:
        raise PermanentError(f"{shown} is not a task (decorate it with @task): nothing was run")
    if found.backend != alias or not isinstance(found.get_backend(), LeitstandBackend):
        raise PermanentError(f"task {shown} belongs to backend {found.backend!r}, not to {alias!r}")
    return found


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _in_task_packages(path: str, listed) -> bool:
    """Whether ``path`` lies under an installed app's package or one of ``listed``."""
    from django.apps import apps

    packages = [config.name for config in apps.get_app_configs()] + list(listed)
    return any(path.startswith(package + ".") for package in packages)


def _in_standard_library(top: str) -> bool:
    """Whether ``top`` would be found in Python's standard library (an app of the same name found first
    on the path is not)."""
    if top not in sys.stdlib_module_names:
        return False
    spec = importlib.util.find_spec(top)
    origin = getattr(spec, "origin", None)
    if spec is None or origin in (None, "built-in", "frozen"):
        return True
    library = [os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")]
    return any(os.path.realpath(origin).startswith(folder + os.sep) for folder in library)


def _backend(alias: str):
    """The configured tasks backend ``alias``, or None when TASKS has none of that name."""
    try:
        return task_backends[alias]
    except ImproperlyConfigured:  # Django's InvalidTaskBackend(Error)
        return None


def _import_log(path: str, failed: BaseException) -> None:
    with _import_logged_lock:
        if path in _import_logged or len(_import_logged) >= MAX_LOGGED_PATHS:
            return
        _import_logged.add(path)
    logger.error(
        "task %s cannot be imported in this process (deploy its module here): its jobs wait and are tried again",
        path,
        exc_info=(type(failed), failed, failed.__traceback__),
    )


registry.resolver_register(TYPE_PREFIX, task_resolve)


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
    task = _task_checked(path, payload.get("backend"))  # imported already: its type was registered here
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PermanentError("the payload's args must be a list and its kwargs an object")
    backend = task.get_backend()
    result = _running(backend._result(Job.objects.get(pk=context.job_id), task))
    task_started.send(type(backend), task_result=result)
    with context.step("task"):
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        except (Exception, SystemExit) as raised:  # SystemExit: its attempt fails, the worker goes on
            logger.exception("task %s raised", task.module_path)  # its traceback kept on the attempt
            _finished(backend, result, raised=raised)
            raise
    try:
        value = normalize_json(value)  # as Django's own backends store it
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as refused:  # its attempt fails with the error, as Django's do
        _finished(backend, result, raised=refused)
        raise
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


def _error(attempt: Attempt) -> TaskError:
    """A failed attempt as Django's ``TaskError``: its exception's class (builtins named as such; the
    runtime's own names, e.g. ``NeedsReview``, as they are) and the traceback its attempt kept (its last
    8,000 characters; the message where none was kept)."""
    name = attempt.error_class
    is_builtin = "." not in name and isinstance(getattr(builtins, name, None), type)
    path = f"builtins.{name}" if is_builtin else name
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
