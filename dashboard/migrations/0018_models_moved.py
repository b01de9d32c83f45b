"""Alerting's models moved to ``alerts``, the archive's to ``history`` and the audit log's to ``jobs``:
only Django's state changes here (the tables stay, under their names); then the roles are granted
the moved models' permissions again under their new apps (``dashboard.roles``)."""

from django.db import migrations

from dashboard.roles import roles_migrate


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0017_route_limits"),
        ("alerts", "0001_models_from_dashboard"),
        ("history", "0001_models_from_dashboard"),
        ("jobs", "0043_audit_log_from_dashboard"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="AlertEvent"),
                migrations.DeleteModel(name="ReceiptTest"),
                migrations.DeleteModel(name="Contact"),
                migrations.DeleteModel(name="Route"),
                migrations.DeleteModel(name="Owner"),
                migrations.DeleteModel(name="Alert"),
                migrations.DeleteModel(name="RuleViolation"),
                migrations.DeleteModel(name="Silence"),
                migrations.DeleteModel(name="ArchivedJob"),
                migrations.DeleteModel(name="ArchiveFile"),
                migrations.DeleteModel(name="AuditEntry"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(roles_migrate, migrations.RunPython.noop),
    ]
