"""Hardening of the append-only log's functions (a review of issue 17's roles):

- The trigger lets a DELETE through only inside the owner's own purge (the session setting alone was
  enough before, for any role with the privilege).
- ``leitstand_log_purge`` resolves nothing through ``public`` (``search_path = pg_catalog, pg_temp``;
  tables named in full), so an object planted in ``public`` cannot run as the owner; it refuses to
  purge the last day (a mistaken ``now()`` cannot wipe the log).
"""

from django.db import migrations

TRIGGER = """
CREATE OR REPLACE FUNCTION jobs_transition_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('leitstand.allow_purge', true) = 'on'
       AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'jobs_transition is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""
TRIGGER_BEFORE = """
CREATE OR REPLACE FUNCTION jobs_transition_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('leitstand.allow_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'jobs_transition is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""
PURGE = """
CREATE OR REPLACE FUNCTION leitstand_log_purge(log regclass, before timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    purged bigint;
BEGIN
    IF log NOT IN ('public.jobs_transition'::regclass, 'public.dashboard_auditentry'::regclass) THEN
        RAISE EXCEPTION '% is not an append-only log', log USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF before > clock_timestamp() - interval '1 day' THEN
        RAISE EXCEPTION 'the last day of % is never purged (before %)', log, before
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('leitstand.allow_purge', 'on', true);
    EXECUTE pg_catalog.format('DELETE FROM %s WHERE at < $1', log) USING before;
    GET DIAGNOSTICS purged = ROW_COUNT;
    PERFORM set_config('leitstand.allow_purge', 'off', true);
    RETURN purged;
END;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0024_job_client_index")]

    operations = [
        migrations.RunSQL(TRIGGER, reverse_sql=TRIGGER_BEFORE),
        migrations.RunSQL(PURGE, reverse_sql=migrations.RunSQL.noop),
    ]
