"""The console's roles (operator, reviewer, viewer) as groups with their permissions."""

from django.db import migrations


def roles_create(apps, schema_editor):
    from dashboard.roles import roles_migrate

    roles_migrate(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("jobs", "0004_reviewescalation_reviewlease_job_job_finished_idx"),
        ("workers", "0006_finding_thumbnail_workerprocess_cpu_percent_and_more"),
        ("rechecks", "0001_recheck_plans"),
    ]

    operations = [migrations.RunPython(roles_create, migrations.RunPython.noop)]
