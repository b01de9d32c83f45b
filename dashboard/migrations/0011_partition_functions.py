"""Partitions are created ahead and dropped whole by the maintenance role, through two functions the
owner owns (``SECURITY DEFINER``, nothing resolved through ``public``):

- ``leitstand_partitions_ensure(days_ahead)`` creates the daily partitions of the transition log and
  the step events from today on (a day that already reached the default partition moves into its own);
- ``leitstand_partitions_drop(older_than)`` drops every daily (and the legacy) partition that ends on
  or before ``older_than``, after moving the rows of jobs still in the database forward into today's
  partition; a partition with history of a job that is neither in the database nor archived is never
  dropped.

``leitstand_jobs_purge`` no longer deletes history rows one by one: they leave with their partition.
"""

from importlib import import_module

from django.db import migrations

JOBS_PURGE_BEFORE = import_module("dashboard.migrations.0010_harden_functions").JOBS_PURGE

TABLES = "ARRAY['jobs_transition', 'jobs_stepevent']"

ENSURE = f"""
CREATE FUNCTION leitstand_partitions_ensure(days_ahead integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tbl text;
    name text;
    day date;
    ahead integer;
    created integer := 0;
    today date := (public.leitstand_now() AT TIME ZONE 'UTC')::date;
BEGIN
    FOREACH tbl IN ARRAY {TABLES} LOOP
        CONTINUE WHEN (SELECT relkind FROM pg_class WHERE oid = to_regclass('public.' || tbl)) IS DISTINCT FROM 'p';
        FOR ahead IN 0..days_ahead LOOP
            day := today + ahead;
            name := tbl || '_p' || to_char(day, 'YYYYMMDD');
            CONTINUE WHEN to_regclass('public.' || name) IS NOT NULL;
            EXECUTE format('CREATE TABLE public.%I (LIKE public.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, tbl);
            PERFORM set_config('leitstand.allow_purge', 'on', true);
            EXECUTE format(
                'WITH moved AS (DELETE FROM public.%I WHERE part_day = $1 RETURNING *) '
                'INSERT INTO public.%I SELECT * FROM moved', tbl || '_default', name
            ) USING day;
            PERFORM set_config('leitstand.allow_purge', 'off', true);
            EXECUTE format(
                'ALTER TABLE public.%I ATTACH PARTITION public.%I FOR VALUES FROM (%L) TO (%L)', tbl, name, day, day + 1
            );
            created := created + 1;
        END LOOP;
    END LOOP;
    RETURN created;
END;
$$;
REVOKE ALL ON FUNCTION leitstand_partitions_ensure(integer) FROM PUBLIC;
"""

DROP = """
CREATE FUNCTION leitstand_partitions_drop(older_than date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    part record;
    upper_bound date;
    unarchived bigint;
    columns text;
    today date := (public.leitstand_now() AT TIME ZONE 'UTC')::date;
    dropped integer := 0;
BEGIN
    PERFORM public.leitstand_partitions_ensure(0);  -- today's partition receives the rows kept
    FOR part IN
        SELECT c.oid::regclass AS name, p.oid AS parent, p.relname AS parent_name,
               pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits AS i
        JOIN pg_class AS c ON c.oid = i.inhrelid
        JOIN pg_class AS p ON p.oid = i.inhparent
        WHERE p.oid = ANY (ARRAY[to_regclass('public.jobs_transition'), to_regclass('public.jobs_stepevent')])
        ORDER BY c.relname
    LOOP
        upper_bound := substring(part.bound FROM $re$TO \\('([0-9-]+)'\\)$re$)::date;
        -- the default partition, one too young, or one that is still written to
        CONTINUE WHEN upper_bound IS NULL OR upper_bound > older_than OR upper_bound > today;
        EXECUTE format(
            'SELECT count(*) FROM %s AS h WHERE NOT EXISTS (SELECT 1 FROM public.jobs_job AS j WHERE j.id = h.job_id) '
            'AND NOT EXISTS (SELECT 1 FROM public.dashboard_archivedjob AS a WHERE a.job_id = h.job_id)', part.name
        ) INTO unarchived;
        IF unarchived > 0 THEN
            RAISE WARNING 'partition % keeps % rows of jobs that were never archived', part.name, unarchived;
            CONTINUE;
        END IF;
        SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO columns
            FROM pg_attribute WHERE attrelid = part.parent AND attnum > 0 AND NOT attisdropped AND attname <> 'part_day';
        -- straight into today's partition: the parent's statement triggers (webhooks, batch counters) stay quiet
        EXECUTE format(
            'INSERT INTO public.%I (%s, part_day) SELECT %s, %L FROM %s AS h '
            'WHERE EXISTS (SELECT 1 FROM public.jobs_job AS j WHERE j.id = h.job_id)',
            part.parent_name || '_p' || to_char(today, 'YYYYMMDD'), columns, columns, today, part.name
        );
        EXECUTE format('DROP TABLE %s', part.name);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;
REVOKE ALL ON FUNCTION leitstand_partitions_drop(date) FROM PUBLIC;
"""

# As 0010, without the row-by-row deletes of the transition log and the step events.
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
    dependencies = [("dashboard", "0010_harden_functions"), ("jobs", "0026_partitioned_history")]

    operations = [
        migrations.RunSQL(ENSURE, reverse_sql="DROP FUNCTION leitstand_partitions_ensure(integer);"),
        migrations.RunSQL(DROP, reverse_sql="DROP FUNCTION leitstand_partitions_drop(date);"),
        migrations.RunSQL(JOBS_PURGE, reverse_sql=JOBS_PURGE_BEFORE),
    ]
