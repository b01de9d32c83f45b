"""Alerting's models, moved here from the console (``dashboard``) with their tables (which keep their
names) and rows. Their content types, and with them every permission and group grant, move too."""

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models

import jobs.models
from jobs.model_moves import content_types_move

MODELS = (
    "alert",
    "alertevent",
    "ruleviolation",
    "owner",
    "contact",
    "route",
    "receipttest",
    "silence",
)


def forward(apps, schema_editor):
    content_types_move(apps, MODELS, source="dashboard", target="alerts")


def backward(apps, schema_editor):
    content_types_move(apps, MODELS, source="alerts", target="dashboard")


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
                    name="Owner",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("description", models.CharField(blank=True, max_length=500)),
                    ],
                    options={
                        "db_table": "dashboard_owner",
                    },
                ),
                migrations.CreateModel(
                    name="Alert",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("rule", models.CharField(max_length=64)),
                        (
                            "scope",
                            models.CharField(
                                blank=True, help_text="pool:…, type:…, source:…, host:…, or empty", max_length=300
                            ),
                        ),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("pending", "pending (not yet held long enough)"),
                                    ("firing", "Firing"),
                                    ("acknowledged", "Acknowledged"),
                                    ("resolved", "Resolved"),
                                ],
                                max_length=15,
                            ),
                        ),
                        ("first_seen", models.DateTimeField()),
                        ("last_seen", models.DateTimeField()),
                        ("fired_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "cleared_since",
                            models.DateTimeField(
                                blank=True, help_text="The condition has been clear since.", null=True
                            ),
                        ),
                        ("resolved_at", models.DateTimeField(blank=True, null=True)),
                        ("acknowledged_by", models.CharField(blank=True, max_length=255)),
                        ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                        ("value", models.FloatField()),
                        ("threshold", models.FloatField()),
                        ("diagnosis", models.CharField(max_length=1000)),
                        ("route", models.CharField(help_text="Who acts: the notification route.", max_length=64)),
                        (
                            "severity",
                            models.CharField(
                                default="ticket", help_text="page (someone acts now) or ticket.", max_length=10
                            ),
                        ),
                        (
                            "notified_at",
                            models.DateTimeField(blank=True, help_text="Last notification of the route.", null=True),
                        ),
                        ("escalated_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "dashboard_alert",
                        "indexes": [models.Index(fields=["state", "-last_seen"], name="alert_state_idx")],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("state", "resolved"), _negated=True),
                                fields=("rule", "scope"),
                                name="alert_one_open_per_rule_scope",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="AlertEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("kind", models.CharField(max_length=20)),
                        ("actor", models.CharField(max_length=255)),
                        ("comment", models.CharField(blank=True, max_length=1000)),
                        (
                            "alert",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="events", to="alerts.alert"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_alertevent",
                    },
                ),
                migrations.CreateModel(
                    name="Contact",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=200)),
                        ("email", models.EmailField(blank=True, max_length=254)),
                        ("phone", models.CharField(blank=True, max_length=50)),
                        ("role", models.CharField(blank=True, help_text="e.g. on call, team lead", max_length=100)),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="contacts", to="alerts.owner"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_contact",
                        "ordering": ("owner", "name"),
                    },
                ),
                migrations.CreateModel(
                    name="Route",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.SlugField(max_length=64, unique=True)),
                        (
                            "webhook_url",
                            models.URLField(blank=True, help_text="Signed JSON POSTs (X-Leitstand-Signature)."),
                        ),
                        (
                            "webhook_secret",
                            models.CharField(blank=True, help_text="The webhook's signing secret.", max_length=200),
                        ),
                        (
                            "emails",
                            models.JSONField(blank=True, default=list, help_text="E-mail addresses, a JSON list."),
                        ),
                        (
                            "alertmanager_url",
                            models.URLField(
                                blank=True,
                                help_text="Prometheus Alertmanager's base URL; alerts are posted to its v2 API.",
                            ),
                        ),
                        (
                            "ack_page_minutes",
                            models.PositiveIntegerField(
                                blank=True,
                                default=15,
                                help_text="A firing page-severity alert escalates when unacknowledged this long.",
                                null=True,
                                validators=[
                                    django.core.validators.MinValueValidator(1),
                                    django.core.validators.MaxValueValidator(10080),
                                ],
                            ),
                        ),
                        (
                            "ack_ticket_minutes",
                            models.PositiveIntegerField(
                                blank=True,
                                default=240,
                                help_text="The same for ticket-severity alerts; empty: never escalate.",
                                null=True,
                                validators=[
                                    django.core.validators.MinValueValidator(1),
                                    django.core.validators.MaxValueValidator(10080),
                                ],
                            ),
                        ),
                        (
                            "renotify_minutes",
                            models.PositiveIntegerField(
                                blank=True,
                                default=60,
                                help_text="Notify again at this interval until acknowledged; empty: never.",
                                null=True,
                                validators=[
                                    django.core.validators.MinValueValidator(1),
                                    django.core.validators.MaxValueValidator(10080),
                                ],
                            ),
                        ),
                        (
                            "test_every_hours",
                            models.PositiveIntegerField(
                                blank=True,
                                default=168,
                                help_text="Send a test notification at this interval; empty: never.",
                                null=True,
                                validators=[
                                    django.core.validators.MinValueValidator(1),
                                    django.core.validators.MaxValueValidator(8784),
                                ],
                            ),
                        ),
                        (
                            "confirm_within_hours",
                            models.PositiveIntegerField(
                                default=24,
                                help_text="A test not confirmed within this time fires route_unconfirmed.",
                                validators=[
                                    django.core.validators.MinValueValidator(1),
                                    django.core.validators.MaxValueValidator(744),
                                ],
                            ),
                        ),
                        (
                            "escalate_to",
                            models.ForeignKey(
                                blank=True,
                                help_text="Escalation target.",
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="alerts.route",
                            ),
                        ),
                        (
                            "fallback",
                            models.ForeignKey(
                                blank=True,
                                help_text="Where route_unconfirmed goes for this route (default: LEITSTAND_ALERT_FALLBACK_ROUTE).",
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="alerts.route",
                            ),
                        ),
                        (
                            "owner",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="routes",
                                to="alerts.owner",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_route",
                    },
                ),
                migrations.CreateModel(
                    name="RuleViolation",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("rule", models.CharField(max_length=64)),
                        (
                            "subject",
                            models.CharField(help_text="What breaks the rule: a finding, a job.", max_length=200),
                        ),
                        ("job_id", models.UUIDField(blank=True, help_text="The job to look at.", null=True)),
                        ("detail", models.CharField(max_length=500)),
                        ("first_seen", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("last_seen", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("resolved_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "dashboard_ruleviolation",
                        "indexes": [models.Index(fields=["rule", "-first_seen"], name="rule_violation_idx")],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("resolved_at__isnull", True)),
                                fields=("rule", "subject"),
                                name="rule_violation_open_once",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Silence",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("rule", models.CharField(max_length=64)),
                        (
                            "scope",
                            models.CharField(blank=True, help_text="Empty: every scope of the rule.", max_length=300),
                        ),
                        ("reason", models.CharField(max_length=500)),
                        ("created_by", models.CharField(max_length=255)),
                        ("created_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        ("ends_at", models.DateTimeField()),
                        ("lifted_at", models.DateTimeField(blank=True, null=True)),
                        ("lifted_by", models.CharField(blank=True, max_length=255)),
                    ],
                    options={
                        "db_table": "dashboard_silence",
                        "indexes": [models.Index(fields=["rule", "ends_at"], name="silence_rule_idx")],
                    },
                ),
                migrations.CreateModel(
                    name="ReceiptTest",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("sent_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                        (
                            "sent_by",
                            models.CharField(
                                help_text="The schedule, or the operator who sent it now.", max_length=255
                            ),
                        ),
                        (
                            "confirm_by",
                            models.DateTimeField(help_text="Not confirmed by then: route_unconfirmed fires."),
                        ),
                        ("confirmed_at", models.DateTimeField(blank=True, null=True)),
                        ("confirmed_by", models.CharField(blank=True, max_length=255)),
                        ("confirmed_via", models.CharField(blank=True, help_text="console or api", max_length=20)),
                        (
                            "route",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="tests", to="alerts.route"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_receipttest",
                        "indexes": [models.Index(fields=["route", "-sent_at"], name="receipttest_route_idx")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forward, backward),
    ]
