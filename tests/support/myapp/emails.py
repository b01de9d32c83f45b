"""Tasks of an app that is importable but not installed (tests/support/myapp): no pool imports this
module at start; it is imported when a pool first claims one of its jobs."""

import os

try:  # Django 6.0 and later
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task
def send_welcome(address: str) -> dict:
    """Send a welcome e-mail (here: say what would be sent, and from which process)."""
    return {"to": address, "subject": f"Welcome, {address.partition('@')[0]}", "pid": os.getpid()}


def helper(marker: str) -> None:
    """A plain function beside the tasks: never run by a pool, whatever a job's payload says."""
    with open(marker, "w") as written:
        written.write("a plain function ran")
    raise AssertionError("a plain function ran as a task")


@task
def _resend(address: str) -> str:
    """A task with a private name: run like any other (only dunder names, ``__main__``, are refused)."""
    return f"resent to {address}"
