from django.db import migrations

from dashboard.roles import roles_migrate


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0007_senior_reviewers"),
        ("jobs", "0022_api_clients"),
        ("api", "0003_tokens_belong_to_clients"),
    ]

    operations = [
        migrations.RunPython(
            roles_migrate, migrations.RunPython.noop
        ),  # every role sees clients; operators manage them
    ]
