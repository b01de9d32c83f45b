"""Rate limits per flow key (issue 39): at most ``rate_starts`` of a key's jobs start per
``rate_seconds`` in its pool, on every host; ``rate_tat`` is the limit's bucket, kept by the claim
(jobs/queries.sql, ``flow_rates_charge``). Three nullable columns: no rewrite of the table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0036_client_open_jobs"),
    ]

    operations = [
        migrations.AddField(
            model_name="flowkey",
            name="rate_seconds",
            field=models.PositiveIntegerField(blank=True, help_text="The rate limit's interval.", null=True),
        ),
        migrations.AddField(
            model_name="flowkey",
            name="rate_starts",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="At most this many of its jobs start per rate_seconds; empty: no rate limit.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="flowkey",
            name="rate_tat",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="flowkey",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("rate_seconds__isnull", True), ("rate_starts__isnull", True)),
                    models.Q(("rate_seconds__gte", 1), ("rate_starts__gte", 1)),
                    _connector="OR",
                ),
                name="flowkey_rate_whole",
            ),
        ),
    ]
