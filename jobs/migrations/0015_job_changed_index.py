"""The API's job list in the order of the last change, built without blocking writes to the jobs table."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0014_webhook_batch_events")]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(fields=["state_changed_at", "id"], name="job_changed_idx"),
        ),
    ]
