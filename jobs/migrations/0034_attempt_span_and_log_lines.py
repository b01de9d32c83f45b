"""An attempt keeps its span and the log lines its handler wrote (issue 38: jobs/tracing.py, jobs/logs.py):
two columns, an empty default and a null, each added without queueing the pools' writers behind it
(jobs/online.py)."""

from django.db import migrations, models

from jobs.online import AddFieldBriefly


class Migration(migrations.Migration):
    atomic = False  # each try its own transaction: a refused lock leaves no queue behind

    dependencies = [("jobs", "0033_job_trace_context")]

    operations = [
        AddFieldBriefly(
            model_name="attempt",
            name="trace_span",
            field=models.CharField(blank=True, db_default="", default="", max_length=55),
        ),
        AddFieldBriefly(model_name="attempt", name="log_lines", field=models.JSONField(blank=True, null=True)),
    ]
