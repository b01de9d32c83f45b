"""Tokens belong to clients. Every existing token becomes a client of its own name, and what it
submitted becomes that client's: its jobs and batches (already in the namespace ``client:<token>``,
migration jobs 0020) and, recursively, their children."""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = """
    SET CONSTRAINTS ALL IMMEDIATE;  -- checked now, so the column can become NOT NULL below
    INSERT INTO jobs_client (name, webhook_url, webhook_secret, created_at, created_by)
    SELECT t.name, '', '', t.created_at, 'migration: one client per existing token'
    FROM jobs_apitoken AS t
    ON CONFLICT (name) DO NOTHING;
    UPDATE jobs_apitoken AS t SET client_id = c.id FROM jobs_client AS c WHERE c.name = t.name;
    UPDATE jobs_batch AS b SET client_id = c.id FROM jobs_client AS c
    WHERE b.key_namespace = 'client:' || c.name AND b.client_id IS NULL;
    UPDATE jobs_job AS j SET client_id = c.id FROM jobs_client AS c
    WHERE j.key_namespace = 'client:' || c.name AND j.client_id IS NULL;
    WITH RECURSIVE owned AS (
        SELECT id, client_id FROM jobs_job WHERE client_id IS NOT NULL AND parent_id IS NULL
        UNION ALL
        SELECT child.id, owned.client_id FROM jobs_job AS child JOIN owned ON child.parent_id = owned.id
    )
    UPDATE jobs_job AS j SET client_id = owned.client_id FROM owned WHERE j.id = owned.id AND j.client_id IS NULL;
    SET CONSTRAINTS ALL DEFERRED;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0002_rate_limits_for_jobs_and_addresses"),
        ("jobs", "0022_api_clients"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="client",
            field=models.ForeignKey(
                help_text="Whose token.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tokens",
                to="jobs.client",
            ),
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="client",
            field=models.ForeignKey(
                help_text="Whose token.",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tokens",
                to="jobs.client",
            ),
        ),
    ]
