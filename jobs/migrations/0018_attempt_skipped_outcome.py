"""Skipped becomes an attempt outcome of its own (it was a "skipped: …" prefix of the completion's
transition cause, which the path check and replay parsed). Attempts completed before are moved by
that same cause; the cause keeps its text (people and the API read it)."""

from django.db import migrations, models

SKIPPED_FROM_CAUSE = """
UPDATE jobs_attempt AS a SET outcome = 'skipped'
WHERE a.outcome = 'completed' AND EXISTS (
    SELECT 1 FROM jobs_transition AS t
    WHERE t.job_id = a.job_id AND t.lease_version = a.lease_version AND t.cause LIKE 'skipped:%')
"""
SKIPPED_TO_COMPLETED = "UPDATE jobs_attempt SET outcome = 'completed' WHERE outcome = 'skipped'"


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_worker_deaths"),
    ]

    operations = [
        migrations.AlterField(
            model_name="attempt",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("completed", "Completed"),
                    ("skipped", "Skipped"),
                    ("recheck_planned", "Recheck Planned"),
                    ("unclear", "Unclear"),
                    ("failed", "Failed"),
                    ("dead", "Dead"),
                    ("released", "Released"),
                    ("lease_expired", "Lease Expired"),
                    ("worker_died", "Worker Died"),
                    ("cancelled", "Cancelled"),
                ],
                max_length=20,
            ),
        ),
        migrations.RunSQL(SKIPPED_FROM_CAUSE, SKIPPED_TO_COMPLETED),
    ]
