"""``leitstand_jobs_purge`` deletes a job only as it was archived: in the state and with the end time
its archive document records. A dead job an operator retried after its document was written, and
that ended again before the purge, has a newer history than the file; it stays (and is archived
again, ``retention._purge_written``) instead of leaving with the older document."""

import importlib

from django.db import migrations

BEFORE = importlib.import_module("dashboard.migrations.0011_partition_functions").JOBS_PURGE

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
          AND j.state = a.state AND j.finished_at IS NOT DISTINCT FROM a.finished_at
        FOR UPDATE OF j
    ) AS archived;
    DELETE FROM public.rechecks_observation
        WHERE job_id = ANY(ids) OR plan_id IN (SELECT id FROM public.rechecks_recheckplan WHERE job_id = ANY(ids));
    DELETE FROM public.rechecks_recheckplan WHERE job_id = ANY(ids);
    DELETE FROM public.workers_finding WHERE job_id = ANY(ids);
    DELETE FROM public.workers_shadowrun WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_reviewlease WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_reviewescalation WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_effect WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_stalewrite WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_attempt WHERE job_id = ANY(ids);
    DELETE FROM public.jobs_job WHERE id = ANY(ids);
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0013_archive_index_retention")]

    operations = [migrations.RunSQL(JOBS_PURGE, reverse_sql=BEFORE)]
