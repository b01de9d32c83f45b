"""Hardening after a review of the roles: the audit log's trigger lets a DELETE through only inside
the owner's own purge, and ``leitstand_jobs_purge`` resolves nothing through ``public``
(``search_path = pg_catalog, pg_temp``; every table named in full)."""

from django.db import migrations

TRIGGER = """
CREATE OR REPLACE FUNCTION dashboard_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('leitstand.allow_purge', true) = 'on'
       AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""
# The one way a job leaves PostgreSQL (run by the maintenance role, owned by the owner): only ended
# jobs in a written (verified) archive file, with everything that refers to them. The ended states
# are the engine's TERMINAL_STATES (tests/dashboard/test_retention.py compares them).
JOBS_PURGE = """
CREATE OR REPLACE FUNCTION leitstand_jobs_purge(job_ids uuid[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ids uuid[];
    purged integer;
BEGIN
    SELECT coalesce(array_agg(id), '{}') INTO ids FROM (
        SELECT j.id FROM public.jobs_job AS j
        JOIN public.dashboard_archivedjob AS a ON a.job_id = j.id
        JOIN public.dashboard_archivefile AS f ON f.id = a.file_id
        WHERE j.id = ANY(job_ids) AND f.state IN ('written', 'purged') AND j.state IN ('done', 'cancelled', 'dead')
        FOR UPDATE OF j
    ) AS archived;
    DELETE FROM public.rechecks_observation
        WHERE job_id = ANY(ids) OR plan_id IN (SELECT id FROM public.rechecks_recheckplan WHERE job_id = ANY(ids));
    DELETE FROM public.rechecks_recheckplan WHERE job_id = ANY(ids);
    DELETE FROM public.workers_finding WHERE job_id = ANY(ids);
    DELETE FROM public.workers_shadowrun WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_reviewlease WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_reviewescalation WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_stepevent WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_effect WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_stalewrite WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_attempt WHERE job_id = ANY(ids);
    PERFORM set_config('leitstand.allow_purge', 'on', true);
    DELETE FROM public.jobs_transition WHERE job_id = ANY(ids);
    PERFORM set_config('leitstand.allow_purge', 'off', true);
    DELETE FROM public.jobs_job WHERE id = ANY(ids);
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0009_archive"), ("jobs", "0025_harden_log_functions")]

    operations = [
        migrations.RunSQL(TRIGGER, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(JOBS_PURGE, reverse_sql=migrations.RunSQL.noop),
    ]
