from django.db import migrations

from dashboard.roles import roles_migrate


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0005_rule_violations"),
        ("jobs", "0014_webhook_batch_events"),
    ]

    operations = [
        migrations.RunPython(roles_migrate, migrations.RunPython.noop),  # every role sees batches
    ]
