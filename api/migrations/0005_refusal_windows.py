"""Submissions refused by backpressure, counted per client, pool, reason and minute (issue 39): the
record the alert rule ``api_submissions_refused`` reads, kept a day."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0004_existing_tokens_see_everything"),
        ("jobs", "0038_job_held"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiRefusalWindow",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pool", models.CharField(max_length=64)),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("client_open_jobs", "429: the client is at its bound of open jobs"),
                            ("bulk_lane_full", "503: the pool's bulk lane is full"),
                        ],
                        max_length=32,
                    ),
                ),
                ("window_start", models.DateTimeField()),
                ("refused", models.PositiveIntegerField(default=0)),
                (
                    "client",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="jobs.client",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["window_start"], name="refusal_window_start_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("client", "pool", "reason", "window_start"),
                        name="refusal_window_once",
                        nulls_distinct=False,
                    )
                ],
            },
        ),
    ]
