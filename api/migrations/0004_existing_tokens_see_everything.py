"""Tokens that existed before clients saw every job; they keep doing so (``jobs:all``), so the PHP
core's tokens still read the crawls started from the console and their recheck plans after the
upgrade. An operator takes the scope away from a partner's token by issuing a new one without it."""

from django.db import migrations

SQL = """
UPDATE jobs_apitoken SET scopes = scopes || '["jobs:all"]'::jsonb
WHERE NOT scopes ? 'jobs:all' AND client_id IN (
    SELECT id FROM jobs_client WHERE created_by = 'migration: one client per existing token'
);
"""


class Migration(migrations.Migration):
    dependencies = [("api", "0003_tokens_belong_to_clients")]

    operations = [migrations.RunSQL(SQL, reverse_sql=migrations.RunSQL.noop)]
