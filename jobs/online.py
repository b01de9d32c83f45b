"""Migration operations that keep the pools writing while a live installation migrates.

Adding a column with a constant default rewrites nothing, but takes the table's strongest lock for an
instant — and while it waits for that lock (behind a writer in a long transaction) every other writer
waits behind it. ``AddFieldBriefly`` asks for the lock under a short ``lock_timeout`` and tries again
until it gets its instant, so no writer waits longer than that on the migration. Use it, in a
migration with ``atomic = False`` (each try its own transaction), for every column added to a table
the pools write; indexes are built with Django's ``AddIndexConcurrently``.
(``tests/processes/test_online_migration.py`` holds a writer in its transaction while it runs.)

Migrations import this module: change what it does only in a way every migration that used it may
run again."""

from __future__ import annotations

import time

from django.db import OperationalError, migrations, transaction

LOCK_TIMEOUT_MS = 200
TRIES = 300  # about a minute of writers in long transactions, then the migration gives up and says so
LOCK_NOT_AVAILABLE = "55P03"


class AddFieldBriefly(migrations.AddField):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        for attempt in range(TRIES):
            try:
                with transaction.atomic(using=schema_editor.connection.alias):
                    schema_editor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                    super().database_forwards(app_label, schema_editor, from_state, to_state)
                return
            except OperationalError as error:
                if getattr(error.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE or attempt == TRIES - 1:
                    raise
                time.sleep(0.05 * (1 + attempt % 5))
