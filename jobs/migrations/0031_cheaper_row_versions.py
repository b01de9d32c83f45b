"""Fewer index entries per job and per attempt (issue 37, ``bench.throughput --wal-profile``).

- A job's parent is indexed only where it has one (``job_parent_idx``). The foreign key's own index
  held an entry for every version of every job row, the root jobs' NULLs included.
- The path check's queue of attempts is indexed without their end in the condition
  (``attempt_to_check_idx``: not yet checked), so an attempt's end changes no indexed column and can be
  a HOT update; ``jobs_attempt`` keeps a fifth of each new page free for those versions (and for the
  heartbeats) with ``fillfactor`` 80 — existing pages are not rewritten.

Each index is built and dropped without blocking writes to its table."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

# The name Django gave the parent foreign key's index (its hash of table and column).
PARENT_FOREIGN_KEY_INDEX = "jobs_job_parent_id_675bb714"


class Migration(migrations.Migration):
    atomic = False  # CREATE and DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0030_client_uses_global_webhook")]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(condition=models.Q(("parent__isnull", False)), fields=["parent"], name="job_parent_idx"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="parent",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.PROTECT,
                        related_name="children",
                        to="jobs.job",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX CONCURRENTLY IF EXISTS {PARENT_FOREIGN_KEY_INDEX}",
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {PARENT_FOREIGN_KEY_INDEX} ON jobs_job (parent_id)",
                ),
            ],
        ),
        AddIndexConcurrently(
            model_name="attempt",
            index=models.Index(condition=models.Q(("path_checked", False)), fields=["id"], name="attempt_to_check_idx"),
        ),
        RemoveIndexConcurrently(model_name="attempt", name="attempt_unchecked_idx"),
        migrations.RunSQL(
            "ALTER TABLE jobs_attempt SET (fillfactor = 80)", "ALTER TABLE jobs_attempt RESET (fillfactor)"
        ),
    ]
