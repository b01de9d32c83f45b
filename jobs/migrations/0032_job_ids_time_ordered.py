"""New jobs get time-ordered IDs (UUIDv7, ``jobs.models.job_id_new``) instead of random ones. Only the
model's Python default changes: no SQL runs, existing IDs stay as they are (they stay valid UUIDs;
only new entries go to the indexes' right edge)."""

from django.db import migrations, models

import jobs.models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0031_cheaper_row_versions"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="id",
            field=models.UUIDField(default=jobs.models.job_id_new, editable=False, primary_key=True, serialize=False),
        ),
    ]
