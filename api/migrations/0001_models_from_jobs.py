"""The token models, moved here from the ``jobs`` app with their tables and rows. Their content types
(and with them every permission and group grant on them) move from ``jobs`` to ``api``."""

import django.db.models.deletion
from django.db import migrations, models

import jobs.models
from jobs.model_moves import content_types_move

MODELS = ("apitoken", "apiratewindow")


def content_types_move_forward(apps, schema_editor):
    content_types_move(apps, MODELS, source="jobs", target="api")


def content_types_move_back(apps, schema_editor):
    content_types_move(apps, MODELS, source="api", target="jobs")


class Migration(migrations.Migration):
    initial = True
    dependencies = [
        ("jobs", "0018_attempt_skipped_outcome"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("prefix", models.CharField(max_length=12, unique=True)),
                        ("secret_hash", models.CharField(max_length=64)),
                        ("scopes", models.JSONField(default=list)),
                        ("created_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={"db_table": "jobs_apitoken"},
                ),
                migrations.CreateModel(
                    name="ApiRateWindow",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("window_start", models.DateTimeField()),
                        ("requests", models.PositiveIntegerField(default=0)),
                        (
                            "token",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="api.apitoken"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "jobs_apiratewindow",
                        "constraints": [
                            models.UniqueConstraint(fields=("token", "window_start"), name="rate_window_once")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_move_forward, content_types_move_back),
    ]
