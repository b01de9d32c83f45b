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


@task
def reach() -> dict:
    """What this task's process may reach of Leitstand's identity: the tables of clients, tokens,
    users, sessions and alert contacts, the secret key, the webhook secret and the metrics token."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connection, transaction
    from django.db.utils import ProgrammingError

    reached = {}
    for table in ("jobs_client", "jobs_apitoken", "auth_user", "django_session", "dashboard_contact"):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 (a fixed name)
                reached[table] = "read"
        except ProgrammingError as refused:
            reached[table] = "denied" if "permission denied" in str(refused) else str(refused)
    try:
        reached["secret_key"] = "set" if settings.SECRET_KEY else "empty"
    except ImproperlyConfigured:
        reached["secret_key"] = "refused"
    reached["webhook_secret"] = settings.LEITSTAND_WEBHOOK["secret"]
    reached["metrics_token"] = settings.LEITSTAND_METRICS_TOKEN
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        reached["role"] = cursor.fetchone()[0]
    return reached


@task
def chain(n: int) -> str:
    """Enqueue ``add(n, 1)`` from inside a task; the new task's ID."""
    return str(add.enqueue(n, 1).id)
