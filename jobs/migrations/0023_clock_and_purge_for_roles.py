"""The database roles (issue 17, finding 8; ``config/db_roles.py``):

- ``leitstand_now()`` is the database's clock, nothing else: the offset a session could set
  (``leitstand.clock_offset``) moved lease and schedule arithmetic for anyone. The test suite installs
  a clock it can move into its own database, as the owner (``tests/support/db.py``); the application
  role cannot replace a function it does not own.
- ``leitstand_log_purge(log, before)`` deletes the rows of an append-only log older than ``before``:
  owned by the owner (``SECURITY DEFINER``), run only by the maintenance role (granted after
  migrating). It is the one way past the append-only triggers; the application has no DELETE on
  those tables at all.
"""

from django.db import migrations

CLOCK_WITH_OFFSET = """
CREATE OR REPLACE FUNCTION leitstand_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp()
        + coalesce(nullif(current_setting('leitstand.clock_offset', true), ''), '0')::interval
$$;
"""
CLOCK = """
CREATE OR REPLACE FUNCTION leitstand_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp()
$$;
"""
PURGE = """
CREATE FUNCTION leitstand_log_purge(log regclass, before timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    purged bigint;
BEGIN
    IF log NOT IN ('jobs_transition'::regclass, 'dashboard_auditentry'::regclass) THEN
        RAISE EXCEPTION '% is not an append-only log', log USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('leitstand.allow_purge', 'on', true);
    EXECUTE format('DELETE FROM %s WHERE at < $1', log) USING before;
    GET DIAGNOSTICS purged = ROW_COUNT;
    PERFORM set_config('leitstand.allow_purge', 'off', true);
    RETURN purged;
END;
$$;
REVOKE ALL ON FUNCTION leitstand_log_purge(regclass, timestamptz) FROM PUBLIC;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0022_api_clients"),
    ]

    operations = [
        migrations.RunSQL(CLOCK, reverse_sql=CLOCK_WITH_OFFSET),
        migrations.RunSQL(PURGE, reverse_sql="DROP FUNCTION leitstand_log_purge(regclass, timestamptz);"),
    ]
