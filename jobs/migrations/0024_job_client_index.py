"""A client's jobs in the order of their last change (the API's list for a token without jobs:all),
built without blocking writes to the jobs table."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0023_clock_and_purge_for_roles")]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("client__isnull", False)),
                fields=["client", "state_changed_at", "id"],
                name="job_client_changed_idx",
            ),
        ),
    ]
