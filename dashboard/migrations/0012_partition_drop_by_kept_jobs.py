"""``leitstand_partitions_drop`` finds the rows to keep from the jobs still in the database that were
created before the partition's day ended (an index range on ``jobs_job.created_at``, then the
partition's ``(job_id, id)`` index), instead of probing every row of the partition: with retention
working, few old jobs remain, so dropping a day costs what those few rows cost, not the day's size.

Why no other row needs a look: a job leaves the database only through ``leitstand_jobs_purge``,
which takes only archived jobs, and the application role may not delete jobs (config/db_roles.py).
So every row of a job no longer in the database is history of an archived job.
"""

from django.db import migrations

DROP = r"""
CREATE OR REPLACE FUNCTION leitstand_partitions_drop(older_than date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
"""


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0011_partition_functions")]

    operations = [migrations.RunSQL(DROP, reverse_sql=migrations.RunSQL.noop)]
