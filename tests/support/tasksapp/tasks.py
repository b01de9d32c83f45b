"""Django ``@task`` functions of an installed app, run on Leitstand's pools by the tests
(tests/runtime/test_django_tasks.py, tests/processes/test_django_tasks.py)."""

try:  # Django 6.0 and later
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@task(priority=100)
def urgent(label: str) -> str:
    return label


@task(priority=-100)
def bulk(label: str) -> str:
    return label


@task(takes_context=True)
def attempt_of(context, note: str) -> dict:
    """Say which attempt ran it."""
    return {"attempt": context.attempt, "note": note}


@task(takes_context=True)
def flaky(context, fail_until: int) -> str:
    """Fail with a transient error until its attempt ``fail_until``."""
    if context.attempt < fail_until:
        raise ConnectionError(f"attempt {context.attempt}: the partner is down")
    return f"succeeded at attempt {context.attempt}"


@task
def broken(order: str) -> None:
    """Always fails with a permanent error (a wrong input)."""
    raise ValueError(f"order {order} has no lines")
