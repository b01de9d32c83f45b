"""The archive's models, moved here from the console (``dashboard``) with their tables (which keep
their names) and rows. Their content types move too."""

import django.db.models.deletion
from django.db import migrations, models

import jobs.models
from jobs.model_moves import content_types_move

MODELS = (
    "archivefile",
    "archivedjob",
)


def forward(apps, schema_editor):
    content_types_move(apps, MODELS, source="dashboard", target="history")


def backward(apps, schema_editor):
    content_types_move(apps, MODELS, source="history", target="dashboard")


class Migration(migrations.Migration):
    initial = True
    dependencies = [
        ("dashboard", "0017_route_limits"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ArchiveFile",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "path",
                            models.CharField(
                                help_text="Relative to the archive directory.", max_length=500, unique=True
                            ),
                        ),
                        ("day", models.DateField(help_text="The day (UTC) its jobs ended.")),
                        ("job_type", models.CharField(max_length=64)),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("written", "Written"),
                                    ("purged", "Purged"),
                                    ("failed", "Failed"),
                                ],
                                default="pending",
                                max_length=10,
                            ),
                        ),
                        ("jobs", models.PositiveIntegerField(default=0, help_text="Jobs written to it.")),
                        (
                            "purged",
                            models.PositiveIntegerField(
                                default=0, help_text="Of those, the jobs that left PostgreSQL."
                            ),
                        ),
                        ("bytes", models.BigIntegerField(default=0)),
                        ("sha256", models.CharField(blank=True, max_length=64)),
                        ("error", models.TextField(blank=True)),
                        ("created_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("written_at", models.DateTimeField(blank=True, null=True)),
                        ("purged_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "indexed",
                            models.BooleanField(
                                default=True,
                                help_text="Its jobs are in the archive index (ArchivedJob); after the index's retention they are found by reading the file.",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_archivefile",
                        "indexes": [
                            models.Index(
                                condition=models.Q(("state", "purged"), _negated=True),
                                fields=["state"],
                                name="archivefile_open_idx",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="ArchivedJob",
                    fields=[
                        ("job_id", models.UUIDField(primary_key=True, serialize=False)),
                        ("line", models.PositiveIntegerField(help_text="0-based line of its document in the file.")),
                        ("type", models.CharField(max_length=64)),
                        ("state", models.CharField(max_length=20)),
                        ("correlation_id", models.CharField(db_index=True, max_length=255)),
                        ("finished_at", models.DateTimeField(null=True)),
                        (
                            "file",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="members",
                                to="history.archivefile",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_archivedjob",
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forward, backward),
    ]
