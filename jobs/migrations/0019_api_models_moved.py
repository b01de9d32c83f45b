"""The API's token models moved to the ``api`` app: only Django's state changes; the tables stay
(``api.ApiToken`` keeps ``db_table = "jobs_apitoken"``)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0018_attempt_skipped_outcome"),
        ("api", "0001_models_from_jobs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiRateWindow"), migrations.DeleteModel(name="ApiToken")],
            database_operations=[],
        )
    ]
