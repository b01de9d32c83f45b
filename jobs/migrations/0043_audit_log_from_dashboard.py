"""The audit log's model, moved here from the console (``dashboard``) beside the transition log, with
its table (``dashboard_auditentry``, the name its trigger and the purge function know) and rows. Its
content type, and with it the roles' permission to view it, moves too."""

from django.db import migrations, models

import jobs.models
from jobs.model_moves import content_types_move

MODELS = ("auditentry",)


def forward(apps, schema_editor):
    content_types_move(apps, MODELS, source="dashboard", target="jobs")


def backward(apps, schema_editor):
    content_types_move(apps, MODELS, source="jobs", target="dashboard")


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0042_client_most_urgent_lane"),
        ("dashboard", "0017_route_limits"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEntry",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("actor", models.CharField(max_length=255)),
                        ("action", models.CharField(max_length=64)),
                        (
                            "target",
                            models.CharField(
                                help_text="An object, or the filter a bulk action acted on.", max_length=500
                            ),
                        ),
                        ("reason", models.CharField(blank=True, max_length=500)),
                        ("result", models.CharField(max_length=500)),
                    ],
                    options={
                        "verbose_name_plural": "audit entries",
                        "db_table": "dashboard_auditentry",
                        "indexes": [models.Index(fields=["-at"], name="auditentry_at_idx")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forward, backward),
    ]
