"""A job keeps the W3C trace context it was created in (issue 38, jobs/tracing.py).

Adding a column with a constant default rewrites nothing, but takes the table's strongest lock for an
instant — and while it waits for that lock (behind a writer in a long transaction) every other writer
waits behind it. Each column is added under a short ``lock_timeout``, tried again until it gets its
instant, so the pools never wait longer than that on the migration."""

import time

from django.db import OperationalError, migrations, models, transaction

LOCK_TIMEOUT_MS = 200
TRIES = 300  # about a minute of writers in long transactions, then the migration gives up and says so


class AddFieldBriefly(migrations.AddField):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        for attempt in range(TRIES):
            try:
                with transaction.atomic(using=schema_editor.connection.alias):
                    schema_editor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                    super().database_forwards(app_label, schema_editor, from_state, to_state)
                return
            except OperationalError as error:
                if getattr(error.__cause__, "sqlstate", None) != "55P03" or attempt == TRIES - 1:  # lock_not_available
                    raise
                time.sleep(0.05 * (1 + attempt % 5))


class Migration(migrations.Migration):
    atomic = False  # each try its own transaction: a refused lock leaves no queue behind

    dependencies = [("jobs", "0032_job_ids_time_ordered")]

    operations = [
        AddFieldBriefly(
            model_name="job",
            name="trace_parent",
            field=models.CharField(blank=True, db_default="", default="", max_length=55),
        ),
        AddFieldBriefly(
            model_name="job",
            name="trace_state",
            field=models.CharField(blank=True, db_default="", default="", max_length=512),
        ),
    ]
