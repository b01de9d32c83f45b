"""A job keeps the W3C trace context it was created in (issue 38, jobs/tracing.py): two columns with
empty defaults, each added without queueing the pools' writers behind it (jobs/online.py)."""

from django.db import migrations, models

from jobs.online import AddFieldBriefly


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
