"""Django's own test tasks (tests/tasks/tasks.py in Django, tests/tasks.py in the django-tasks backport),
for the contract tests of tests/processes/test_django_tasks_contract.py.

Deliberately not the app's ``tasks`` module: a pool process does not import this module at start,
so it meets these tasks only by their module paths, when it claims their jobs.

Django's names throughout (a path too long for a job type is shortened by the backend's ``type_name``).
Adapted: the async task is left undecorated (``noop_task_async``), since this backend refuses async
tasks when they are defined (test_validate_disallowed_async_task decorates it).
"""

from typing import Any

try:  # Django 6.0 and later
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskContext, task


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task
def noop_task_from_bare_decorator(*args: Any, **kwargs: Any) -> None:
    return None


async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    # Something JSON cannot hold.
    return lambda: True


@task(takes_context=True)
def get_task_id(context: TaskContext) -> str:
    return context.task_result.id


@task(takes_context=True)
def test_context(context: TaskContext, attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
