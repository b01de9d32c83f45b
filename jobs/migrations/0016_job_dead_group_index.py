"""The dead-letter page's groups (type, error class) in the jobs list, newest first, built without
blocking writes to the jobs table."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0015_job_changed_index")]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                fields=["type", "error_class", "-created_at"], name="job_dead_group_idx", condition=Q(state="dead")
            ),
        ),
    ]
