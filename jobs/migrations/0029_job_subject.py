"""What a job is about (``Job.subject``, declared per type, stored at submission) and the index that
finds jobs by its prefix. The column has a constant default (no table rewrite); the index is built
concurrently, as every index added to ``jobs_job`` after its first release (docs/operations.md)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0028_stepevent_deferred")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="subject",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="What the job is about, as its type declares it (a crawl's or an analysis's URL, a recheck's plan).",
                max_length=500,
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=~models.Q(subject=""),
                fields=["subject"],
                name="job_subject_idx",
                opclasses=["varchar_pattern_ops"],
            ),
        ),
    ]
