from django.db import migrations

from dashboard.roles import roles_migrate


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0006_roles_see_batches"),
        ("jobs", "0021_review_escalated_permission"),
    ]

    operations = [
        migrations.RunPython(roles_migrate, migrations.RunPython.noop),  # the senior reviewer role
    ]
