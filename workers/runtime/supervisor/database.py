"""The supervisor's database calls are bounded: its loop also hands out the work, so a database call
must never hold it long (a lock wait, a slow server, a server that is away)."""

from __future__ import annotations

from contextlib import contextmanager

from django.db import connection, transaction

# The longest a database statement of the supervisor may take.
DATABASE_TIMEOUT_MS = 3000


@contextmanager
def bounded():
    """A transaction whose statements give up after ``DATABASE_TIMEOUT_MS``."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(DATABASE_TIMEOUT_MS)])
        yield
