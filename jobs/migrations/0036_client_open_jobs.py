"""A bound on an API client's open jobs (issue 39: backpressure): the client's own bound
(``max_open_jobs``, empty: ``LEITSTAND_API_CLIENT_OPEN_JOBS``), and the index its count walks — a
client's open jobs only (``job_client_open_idx``), built without blocking the pools' writes."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0035_flow_keys")]

    operations = [
        migrations.AddField(
            model_name="client",
            name="max_open_jobs",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Open jobs it may have before its submissions are answered 429; empty: the default.",
                null=True,
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("client__isnull", False), models.Q(("state__in", ("done", "dead", "cancelled")), _negated=True)
                ),
                fields=["client"],
                name="job_client_open_idx",
            ),
        ),
    ]
