"""The django.tasks backend (workers/runtime/tasks.py), case by case against what Django's Tasks
framework defines: enqueue on commit, get_result and its statuses, priorities, queue names, run_after,
takes_context, errors with their tracebacks, arguments and return values as JSON — run by a pool
runtime in this process (tests/processes/test_django_tasks.py runs them in real pools)."""

import sys
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from jobs import leases
from jobs.models import Job, State
from tests.support.tasksapp import tasks
from workers.runtime import tasks as backend_module
from workers.runtime.registry import registry
from workers.runtime.tasks import (
    InvalidTaskError,
    LeitstandBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    lane,
    task_enqueued,
    task_finished,
    task_started,
    type_name,
)

pytestmark = pytest.mark.django_db(transaction=True)


def job_of(result) -> Job:
    return Job.objects.get(pk=result.id)


def test_a_task_is_a_job_type_of_its_own_in_the_tasks_pool():
    result = tasks.add.enqueue(2, 3)
    job = job_of(result)
    assert (job.type, job.pool, job.priority, job.state) == (
        type_name("tests.support.tasksapp.tasks.add"),
        "tasks",
        5,
        "planned",
    )
    assert job.type == "task__tests__support__tasksapp__tasks__add"
    assert (result.status, result.args, result.kwargs, result.backend) == (
        TaskResultStatus.READY,
        [2, 3],
        {},
        "default",
    )
    assert result.task is tasks.add and not result.is_finished


def test_enqueued_in_a_transaction_it_exists_only_if_that_commits():
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 1)
        assert Job.objects.filter(pk=result.id).exists()  # inside: created with the caller's change
        raise RuntimeError("the business change fails")
    assert not Job.objects.filter(pk=result.id).exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


def test_a_pool_runs_it_and_get_result_reads_the_return_value(pool_runtime):
    result = tasks.add.enqueue(a=20, b=22)
    pool_runtime("tasks").wake()
    read = tasks.add.get_result(result.id)
    assert (read.status, read.return_value, read.errors, read.attempts) == (TaskResultStatus.SUCCESSFUL, 42, [], 1)
    assert read.enqueued_at <= read.started_at <= read.finished_at
    assert job_of(result).state == State.DONE
    result.refresh()  # the framework's refresh reads it again through the backend
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


@pytest.mark.parametrize(("priority", "expected"), [(100, 0), (60, 2), (0, 5), (-40, 7), (-80, 9), (-100, 9)])
def test_django_priorities_map_onto_the_lanes(priority, expected):
    assert lane(priority) == expected
    assert job_of(tasks.add.using(priority=priority).enqueue(1, 2)).priority == expected


def test_the_more_urgent_task_is_claimed_first():
    bulk, urgent = tasks.bulk.enqueue("bulk"), tasks.urgent.enqueue("urgent")
    claimed = leases.claim(pool="tasks", worker=leases.WorkerIdentity("t", 1, "tasks"), lease_seconds=60, limit=1)
    assert [job.id for job in claimed] == [job_of(urgent).pk]
    assert job_of(bulk).priority == 9 and job_of(urgent).priority == 0


def test_run_after_is_the_due_time_and_holds_it_back(pool_runtime, db_clock):
    later = db_clock.now() + timedelta(minutes=10)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    assert job_of(result).due_at == later
    pool_runtime("tasks").wake()
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    db_clock.advance(seconds=601)
    pool_runtime("tasks").wake()
    assert tasks.add.get_result(result.id).return_value == 3


def test_a_queue_names_a_pool_and_one_not_allowed_is_refused():
    assert job_of(tasks.add.using(queue_name="synthetic").enqueue(1, 2)).pool == "synthetic"
    with pytest.raises(InvalidTaskError, match="not valid for backend"):
        tasks.add.using(queue_name="crawl")  # not in TASKS' QUEUES
    with pytest.raises(InvalidTaskError):
        tasks.add.using(queue_name="notify")


def test_arguments_travel_as_json_and_what_json_cannot_hold_is_refused():
    result = tasks.attempt_of.enqueue(note=("a", "tuple"))
    assert job_of(result).payload["kwargs"] == {"note": ["a", "tuple"]}
    with pytest.raises(TypeError, match="Unsupported type"):  # Django's normalize_json, as its tests expect
        tasks.add.enqueue(object(), 1)
    with pytest.raises(ValueError, match="Out of range float"):  # NaN: PostgreSQL's JSON cannot hold it
        tasks.add.enqueue(float("nan"), 1)
    assert not Job.objects.filter(type=type_name("tests.support.tasksapp.tasks.add")).exists()


def test_the_frameworks_signals_are_sent_where_django_sends_them(pool_runtime):
    """task_enqueued in the enqueuing process, task_started and task_finished around each attempt
    in the worker (here the pool runtime in this process), the backend's class as the sender."""
    seen = []

    def record(signal_name):
        def receiver(sender, task_result, **kwargs):
            seen.append((signal_name, sender, task_result.id, task_result.status, list(task_result.errors)))

        return receiver

    receivers = {name: record(name) for name in ("enqueued", "started", "finished")}
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])
    try:
        good = tasks.add.enqueue(2, 2)
        bad = tasks.broken.enqueue("B-2")
        pool_runtime("tasks").wake()
    finally:
        task_enqueued.disconnect(receivers["enqueued"])
        task_started.disconnect(receivers["started"])
        task_finished.disconnect(receivers["finished"])
    by_result = {
        result.id: [(name, sender, status) for name, sender, rid, status, _ in seen if rid == result.id]
        for result in (good, bad)
    }
    assert by_result[good.id] == [
        ("enqueued", LeitstandBackend, TaskResultStatus.READY),
        ("started", LeitstandBackend, TaskResultStatus.RUNNING),
        ("finished", LeitstandBackend, TaskResultStatus.SUCCESSFUL),
    ]
    assert [status for _, _, status in by_result[bad.id]] == [
        TaskResultStatus.READY,
        TaskResultStatus.RUNNING,
        TaskResultStatus.FAILED,
    ]
    (error,) = next(errors for name, _, rid, _, errors in seen if rid == bad.id and name == "finished")
    assert error.exception_class is ValueError and "order B-2 has no lines" in error.traceback


def test_a_task_that_takes_context_gets_its_attempt(pool_runtime):
    result = tasks.attempt_of.enqueue("first")
    pool_runtime("tasks").wake()
    assert tasks.attempt_of.get_result(result.id).return_value == {"attempt": 1, "note": "first"}


def test_a_transient_error_is_retried_and_kept_with_its_traceback(pool_runtime):
    result = tasks.flaky.enqueue(fail_until=2)
    pool_runtime("tasks").wake()
    waiting = tasks.flaky.get_result(result.id)
    assert (waiting.status, job_of(result).state) == (TaskResultStatus.READY, State.FAILED)  # its retry waits
    (error,) = waiting.errors
    assert error.exception_class is ConnectionError
    assert "Traceback" in error.traceback and "attempt 1: the partner is down" in error.traceback
    Job.objects.filter(pk=result.id).update(next_attempt_at=job_of(result).next_attempt_at - timedelta(hours=1))
    leases.retries_promote_due()
    pool_runtime("tasks").wake()
    done = tasks.flaky.get_result(result.id)
    assert (done.status, done.return_value, len(done.errors), done.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        "succeeded at attempt 2",
        1,
        2,
    )


def test_a_permanent_error_ends_dead_in_the_dead_letter_queue(pool_runtime):
    result = tasks.broken.enqueue("A-17")
    pool_runtime("tasks").wake()
    failed = tasks.broken.get_result(result.id)
    assert (failed.status, job_of(result).state) == (TaskResultStatus.FAILED, State.DEAD)
    assert failed.errors[0].exception_class is ValueError and "order A-17 has no lines" in failed.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        failed.return_value  # noqa: B018 (the framework's property raises for a failed task)


def test_get_result_refuses_what_is_not_one_of_its_tasks(make_job):
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("not-a-uuid")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(str(make_job().pk))  # a crawl job
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("01935d4e-7b1c-7c3a-9f0e-5a4b3c2d1e0f")


@pytest.mark.parametrize(
    ("params", "refusal"),
    [
        ({"ENQUEUE_ON_COMMIT": False}, "ENQUEUE_ON_COMMIT False is not supported"),
        ({"OPTIONS": {"ENQUEUE_ON_COMMIT": False}}, "ENQUEUE_ON_COMMIT False is not supported"),
        ({"OPTIONS": {"TIMEOUT": 5}}, "unknown options: TIMEOUT"),
        # Issue 54, item 10: never the system's own pools, whatever the settings list.
        ({"QUEUES": ["default", "notify"]}, "names notify: a pool of the system's own work"),
        ({"QUEUES": ["control"]}, "names control"),
    ],
)
def test_a_configuration_it_cannot_honour_is_refused_at_start(params, refusal):
    with pytest.raises(ImproperlyConfigured, match=refusal):
        LeitstandBackend("other", params)


def test_a_payload_cannot_send_the_handler_to_another_task_or_object(pool_runtime):
    """The handler runs only the task its job type was registered for, with a list and an object."""
    result = tasks.add.enqueue(1, 2)
    other = tasks.broken.enqueue("x")
    Job.objects.filter(pk=result.id).update(payload={**job_of(result).payload, "task": "os.system"})
    Job.objects.filter(pk=other.id).update(payload={**job_of(other).payload, "args": "rm -rf /"})
    pool_runtime("tasks").wake()
    assert (job_of(result).state, job_of(result).error_class) == (State.DEAD, "jobs.errors.PermanentError")
    assert "names task 'os.system'" in job_of(result).error_message
    assert "args must be a list" in job_of(other).error_message


WELCOME = "tests.support.myapp.emails.send_welcome"


@pytest.fixture
def unmet():
    """This process as a pool that has not met tests/support/myapp's tasks: their module and types
    forgotten before and after the test."""

    def forget() -> None:
        for name in [name for name in sys.modules if name.startswith("tests.support.myapp")]:
            del sys.modules[name]
        for path in (WELCOME, "tests.support.myapp.emails.helper", "tests.support.myapp.later.run"):
            registry.unregister(type_name(path))
            backend_module._registered_paths.pop(type_name(path), None)
            backend_module._import_logged.discard(path)
        backend_module._import_failed.clear()

    forget()
    yield forget
    forget()


def hostile(job_type: str, **payload) -> Job:
    """A task's job changed in the database to name what a hostile payload would."""
    job = job_of(tasks.add.enqueue(1, 2))
    Job.objects.filter(pk=job.pk).update(type=job_type, payload={**job.payload, **payload})
    return job_of(job)


def test_a_task_outside_any_tasks_module_runs_on_a_pool_that_never_imported_it(unmet, pool_runtime):
    from tests.support.myapp import emails

    result = emails.send_welcome.enqueue("ada@example.org")
    unmet()  # the pool's process has neither the module nor the type
    runtime = pool_runtime("tasks")
    assert type_name(WELCOME) not in runtime.types
    runtime.wake()
    job = job_of(result)
    assert (job.state, job.attempts) == (State.DONE, 1)
    assert type_name(WELCOME) in runtime.types and "tests.support.myapp.emails" in sys.modules
    from tests.support.myapp import emails as again

    read = again.send_welcome.get_result(result.id)
    assert (read.status, read.return_value["subject"]) == (TaskResultStatus.SUCCESSFUL, "Welcome, ada")


@pytest.mark.parametrize(
    ("job_type", "payload", "reason"),
    [
        # Another module's task under a type: the type names the task, not the payload.
        (type_name(WELCOME), {"task": "tests.support.tasksapp.tasks.add"}, "not the one of job type"),
        # A plain function beside the tasks: imported, never run.
        (type_name("tests.support.myapp.emails.helper"), {"task": "tests.support.myapp.emails.helper"}, "not a task"),
        (type_name("os.system"), {"task": "os.system", "args": ["touch /tmp/x"]}, "not under an installed app"),
        # A module that acts when imported (CPython's test runner, any package's __main__): never imported.
        (type_name("test.__main__.x"), {"task": "test.__main__.x"}, "not a task's import path"),
        (type_name("jobs.__init__.x"), {"task": "jobs.__init__.x"}, "not a task's import path"),
        # An installed app's module that is no task (imported, as Django's autodiscovery would).
        (type_name("jobs.errors.classify"), {"task": "jobs.errors.classify"}, "not a task"),
        (type_name(WELCOME), {"task": WELCOME, "backend": "elsewhere"}, "backend 'elsewhere'"),
        (type_name(WELCOME), {"task": WELCOME, "backend": ["default"]}, "backend ['default']"),
    ],
)
def test_a_payload_naming_what_is_not_its_task_is_refused_and_nothing_runs(
    unmet, pool_runtime, tmp_path, job_type, payload, reason
):
    marker = tmp_path / "ran"
    if payload["task"].endswith("helper"):
        payload = {**payload, "args": [str(marker)]}
    job = hostile(job_type, **payload)
    pool_runtime("tasks").wake()
    job = job_of(job)
    assert (job.state, job.error_class) == (State.DEAD, "jobs.errors.PermanentError")
    assert reason in job.error_message
    assert not marker.exists(), "the plain function ran"
    assert job_type not in {t.name for t in registry.all()}


def test_a_task_whose_module_is_not_deployed_waits_for_it_without_using_its_retries(
    unmet, pool_runtime, tmp_path, monkeypatch, caplog
):
    """A deployment's error, not the task's: deferred (its attempt released, no retry used), logged
    once with the import's error, and run once the module is there; past the deferred jobs' useful
    life it ends dead with an importable class."""
    path = "tests.support.myapp.later.run"
    job = hostile(type_name(path), task=path, args=[], kwargs={})
    runtime = pool_runtime("tasks")
    for _ in range(2):  # the second time without importing it again (remembered for IMPORT_RETRY_SECONDS)
        runtime.wake()
        leases.reorder(job.pk, due_at=job.due_at)  # due again at once (the wait is 60 s)
    waiting = job_of(job)
    assert (waiting.state, waiting.attempts) == (State.PLANNED, 0)
    released = list(waiting.attempt_log.order_by("lease_version").values_list("outcome", "error_message"))
    assert [outcome for outcome, _ in released] == ["released", "released"]
    assert "cannot be imported here: ModuleNotFoundError" in released[0][1]
    logged = [r for r in caplog.records if "cannot be imported in this process" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info, "the import's error once per process, with its traceback"

    # Deployed: the module on the path, and the next try runs it.
    (tmp_path / "later.py").write_text(
        "try:\n    from django.tasks import task\nexcept ImportError:\n    from django_tasks import task\n\n"
        "@task\ndef run():\n    return 'deployed'\n"
    )
    import tests.support.myapp

    backend_module._import_failed.clear()  # a minute later: IMPORT_RETRY_SECONDS has passed
    monkeypatch.setattr(tests.support.myapp, "__path__", [*tests.support.myapp.__path__, str(tmp_path)])
    leases.reorder(job.pk, due_at=job.due_at)
    runtime.wake()
    assert (job_of(job).state, job_of(job).attempts) == (State.DONE, 1)

    # Never deployed, past the deferred jobs' useful life: dead, with a class that imports.
    other = hostile(type_name("tests.support.myapp.missing.run"), task="tests.support.myapp.missing.run")
    Job.objects.filter(pk=other.pk).update(created_at=other.created_at - timedelta(days=8))  # 7 by default
    runtime.wake()
    dead = job_of(other)
    assert (dead.state, dead.error_class) == (State.DEAD, "workers.runtime.tasks.TaskNotImportable")
    assert "deferred past its useful life" in dead.error_message


def test_a_job_of_a_type_no_app_can_resolve_fails_with_an_importable_class(pool_runtime, make_job):
    job = make_job(pool="tasks")
    Job.objects.filter(pk=job.pk).update(type="nobody_knows_this")
    pool_runtime("tasks").wake()
    dead = job_of(job)
    assert (dead.state, dead.error_class) == (State.DEAD, "workers.runtime.registry.UnknownJobType")


def test_task_types_that_would_collide_are_refused_when_defined():
    long_path = "tests.support.myapp." + "very_long_module_name." * 4 + "send"
    assert len(type_name(long_path)) == 64 and type_name(long_path) != type_name(long_path + "x")
    name = type_name(tasks.add.module_path)
    colliding = "tests.support__tasksapp.tasks.add"  # the same type name: dots and "__" are one
    assert type_name(colliding) == name
    backend_module._registered_paths[name] = colliding  # as if that task had been defined first
    try:
        with pytest.raises(InvalidTaskError, match="rename one of them"):
            tasks.add.get_backend().validate_task(tasks.add)
    finally:
        backend_module._registered_paths[name] = tasks.add.module_path


def test_the_home_names_the_pool_of_a_task_type_only_a_pool_met(unmet, db_clock):
    """The control process never imports a task's module: the home's pipeline view reads its pool
    from its jobs."""
    from dashboard.operations.snapshot import pipeline_figures
    from tests.support.myapp import emails

    emails.send_welcome.enqueue("x@example.org")
    unmet()  # as in the control process: the type is not registered there
    figures = pipeline_figures(db_clock.now())["types"][type_name(WELCOME)]
    assert (figures["pool"], figures["states"]) == ("tasks", {"planned": 1})


def test_one_jobs_hostile_payload_does_not_refuse_the_others_of_its_type(unmet, pool_runtime):
    from tests.support.myapp import emails

    good = emails.send_welcome.enqueue("ada@example.org")
    bad = job_of(emails.send_welcome.enqueue("eve@example.org"))
    Job.objects.filter(pk=bad.pk).update(payload={**bad.payload, "backend": "elsewhere"})
    unmet()
    pool_runtime("tasks").wake()  # both claimed together, the hostile one first in line
    assert (job_of(bad).state, job_of(good).state) == (State.DEAD, State.DONE)


def test_a_task_job_in_a_pool_its_backend_never_uses_is_refused(unmet, pool_runtime):
    from tests.support.myapp import emails
    from workers.runtime.services import job_submit

    payload = {**job_of(emails.send_welcome.enqueue("x@example.org")).payload, "pool": "analysis"}
    job = job_submit(job_type=type_name(WELCOME), payload=payload, idempotency_key="elsewhere", actor="test").job
    unmet()
    assert job.pool == "analysis"  # a row written to run a task in a pool its backend never uses
    pool_runtime("analysis").wake()
    refused = job_of(job)
    assert (refused.state, refused.error_class) == (State.DEAD, "jobs.errors.PermanentError")
    assert "pool 'analysis' runs no task" in refused.error_message


@pytest.mark.parametrize(
    "payload",
    [
        {"task": "tests.support.myapp.emails.helper"},  # a plain function
        {"task": "test.__main__.x"},  # a module that acts when imported
        {"task": "tests.support.myapp.emails.send_welcome", "backend": 7},
    ],
)
def test_get_result_reads_no_job_row_that_names_what_a_pool_would_refuse(unmet, payload):
    job = hostile(type_name(payload["task"]), **payload)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(str(job.pk))


def test_get_result_reads_no_job_whose_payload_is_not_an_object():
    job = job_of(tasks.add.enqueue(1, 2))
    Job.objects.filter(pk=job.pk).update(payload=["not", "an", "object"])
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(str(job.pk))


def test_a_task_with_a_private_name_runs(unmet, pool_runtime):
    from tests.support.myapp import emails

    result = emails._resend.enqueue("ada@example.org")
    unmet()
    registry.unregister(type_name("tests.support.myapp.emails._resend"))
    backend_module._registered_paths.pop(type_name("tests.support.myapp.emails._resend"), None)
    pool_runtime("tasks").wake()
    assert (job_of(result).state, job_of(result).attempts) == (State.DONE, 1)
