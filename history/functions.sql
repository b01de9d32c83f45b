-- The current text of every database function and trigger the history app owns: the one place to read
-- them. The migrations made them (a migration that changes one carries its whole new text and this
-- file changes with it); tests/engine/test_functions.py checks that what the migrated database runs
-- is exactly this (pg_get_functiondef and pg_get_triggerdef, up to whitespace), and that every
-- function and trigger of the database stands in one of these files.
--
-- A definition begins at ``-- name: <name>`` (a trigger's name ends in ``_trigger``), the comment
-- lines after it are its documentation (read by jobs/sql.py, as for queries.sql).


-- name: leitstand_jobs_purge
-- Delete archived jobs with everything that belongs to them (retention): only ended jobs of written
-- files, each only in the state and with the end time its archive document records. Their history
-- leaves with its daily partitions (leitstand_partitions_drop). Run by the maintenance role.
CREATE OR REPLACE FUNCTION leitstand_jobs_purge(job_ids uuid[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
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


-- name: leitstand_partitions_ensure
-- Create the daily partitions of the transition log and the step events from today to days_ahead
-- ahead, moving rows that landed in the default partition into their day.
CREATE OR REPLACE FUNCTION leitstand_partitions_ensure(days_ahead integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    tbl text;
    name text;
    day date;
    ahead integer;
    created integer := 0;
    today date := (public.leitstand_now() AT TIME ZONE 'UTC')::date;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['jobs_transition', 'jobs_stepevent'] LOOP
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


-- name: leitstand_partitions_drop
-- Drop the daily partitions that ended before older_than (never today's, never the default),
-- first moving the rows of jobs still kept into today's partition.
CREATE OR REPLACE FUNCTION leitstand_partitions_drop(older_than date)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    part record;
    upper_bound date;
    columns text;
    kept uuid[];
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
        upper_bound := substring(part.bound FROM $re$TO \('([0-9-]+)'\)$re$)::date;
        -- the default partition, one too young, or one that is still written to
        CONTINUE WHEN upper_bound IS NULL OR upper_bound > older_than OR upper_bound > today;
        SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO columns
            FROM pg_attribute WHERE attrelid = part.parent AND attnum > 0 AND NOT attisdropped AND attname <> 'part_day';
        -- the rows of jobs still kept move straight into today's partition (the parent's statement
        -- triggers — webhooks, batch counters — stay quiet); they keep their times
        SELECT array_agg(j.id) INTO kept FROM public.jobs_job AS j
            WHERE j.created_at < (upper_bound::timestamp AT TIME ZONE 'UTC');
        IF kept IS NOT NULL THEN
            EXECUTE format(
                'INSERT INTO public.%I (%s, part_day) SELECT %s, %L FROM %s AS h WHERE h.job_id = ANY ($1)',
                part.parent_name || '_p' || to_char(today, 'YYYYMMDD'), columns, columns, today, part.name
            ) USING kept;
        END IF;
        EXECUTE format('DROP TABLE %s', part.name);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;
