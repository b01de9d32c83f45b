"""The transition log and the step events become time-partitioned (issue 18): one partition per day
they were written (``part_day``, UTC), so a day of history leaves with one ``DROP TABLE`` instead of
millions of row deletes. The existing table becomes the partition ``<table>_legacy`` (every day before
this migration) with its data and indexes; a ``<table>_default`` partition catches any day not created
yet; the next eight days are created here and then, ahead of time, by the maintenance role
(``leitstand_partitions_ensure``). The primary key becomes (id, part_day) with the same sequence
numbers; the foreign key to the job goes, because history of an archived and purged job stays until
its day's partition is dropped (``leitstand_partitions_drop``, which first moves the rows of jobs
still kept forward). Triggers and indexes move to the partitioned table (PostgreSQL clones them onto
every partition, and reuses the legacy table's indexes instead of building them again; only the new
primary key index is built over the legacy rows).

Reversible: the way back copies every row into a plain table again.
"""

from django.db import migrations, models

TABLES = "ARRAY['jobs_transition', 'jobs_stepevent']"

FORWARD = f"""
DO $$
DECLARE
    tbl text;
    legacy text;
    today date := (leitstand_now() AT TIME ZONE 'UTC')::date;
    triggers text[];
    indexes text[];
    statement text;
    item record;
    top bigint;
    day integer;
BEGIN
    FOREACH tbl IN ARRAY {TABLES} LOOP
        legacy := tbl || '_legacy';
        SELECT coalesce(array_agg(pg_get_triggerdef(oid)), '{{}}') INTO triggers
            FROM pg_trigger WHERE tgrelid = tbl::regclass AND NOT tgisinternal;
        SELECT coalesce(array_agg(pg_get_indexdef(indexrelid)), '{{}}') INTO indexes
            FROM pg_index WHERE indrelid = tbl::regclass AND NOT indisprimary;
        FOR item IN SELECT tgname FROM pg_trigger WHERE tgrelid = tbl::regclass AND NOT tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON %I', item.tgname, tbl);
        END LOOP;
        FOR item IN SELECT conname FROM pg_constraint WHERE conrelid = tbl::regclass AND contype = 'f' LOOP
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl, item.conname);
        END LOOP;
        EXECUTE format('SELECT coalesce(max(id), 0) + 1 FROM %I', tbl) INTO top;
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP IDENTITY', tbl);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl, tbl || '_pkey');
        FOR item IN SELECT indexrelid::regclass::text AS name FROM pg_index WHERE indrelid = tbl::regclass LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', item.name, left(item.name, 50) || '_legacy');
        END LOOP;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, legacy);
        EXECUTE format('ALTER TABLE %I ADD COLUMN part_day date NOT NULL DEFAULT %L', legacy, today - 1);
        EXECUTE format(
            'CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (part_day)',
            tbl, legacy
        );
        EXECUTE format(
            'ALTER TABLE %I ALTER COLUMN part_day SET DEFAULT ((leitstand_now() AT TIME ZONE %L)::date)', tbl, 'UTC'
        );
        EXECUTE format('CREATE SEQUENCE %I START %s OWNED BY %I.id', tbl || '_id_seq', top, tbl);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id SET DEFAULT nextval(%L::regclass)', tbl, tbl || '_id_seq');
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', tbl, legacy, today);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tbl || '_default', tbl);
        FOR day IN 0..7 LOOP
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                tbl || '_p' || to_char(today + day, 'YYYYMMDD'), tbl, today + day, today + day + 1
            );
        END LOOP;
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id, part_day)', tbl);
        FOREACH statement IN ARRAY indexes LOOP
            EXECUTE statement;  -- on the partitioned table: the legacy index of that definition is reused
        END LOOP;
        FOREACH statement IN ARRAY triggers LOOP
            EXECUTE statement;
        END LOOP;
    END LOOP;
END $$;
"""

BACKWARD = f"""
DO $$
DECLARE
    tbl text;
    plain text;
    triggers text[];
    indexes text[];
    statement text;
    columns text;
    top bigint;
BEGIN
    FOREACH tbl IN ARRAY {TABLES} LOOP
        plain := tbl || '_plain';
        SELECT coalesce(array_agg(pg_get_triggerdef(oid)), '{{}}') INTO triggers
            FROM pg_trigger WHERE tgrelid = tbl::regclass AND NOT tgisinternal;
        SELECT coalesce(array_agg(pg_get_indexdef(indexrelid)), '{{}}') INTO indexes
            FROM pg_index WHERE indrelid = tbl::regclass AND NOT indisprimary;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', plain, tbl);
        EXECUTE format('ALTER TABLE %I DROP COLUMN part_day', plain);
        SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO columns
            FROM pg_attribute WHERE attrelid = plain::regclass AND attnum > 0 AND NOT attisdropped;
        EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I', plain, columns, columns, tbl);
        EXECUTE format('SELECT coalesce(max(id), 0) + 1 FROM %I', plain) INTO top;
        EXECUTE format('DROP TABLE %I CASCADE', tbl);
        EXECUTE format('ALTER TABLE %I RENAME TO %I', plain, tbl);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP DEFAULT', tbl);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH %s)', tbl, top);
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', tbl);
        EXECUTE format(
            'ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (job_id) REFERENCES jobs_job (id) '
            'DEFERRABLE INITIALLY DEFERRED NOT VALID',
            tbl, tbl || '_job_id_fk_jobs_job_id'
        );
        FOREACH statement IN ARRAY indexes LOOP
            EXECUTE replace(statement, ' ON ONLY ', ' ON ');
        END LOOP;
        FOREACH statement IN ARRAY triggers LOOP
            EXECUTE statement;
        END LOOP;
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0025_harden_log_functions")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)],
            state_operations=[
                migrations.AlterField(
                    model_name="transition",
                    name="job",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="transitions",
                        to="jobs.job",
                    ),
                ),
                migrations.AlterField(
                    model_name="stepevent",
                    name="job",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="steps",
                        to="jobs.job",
                    ),
                ),
            ],
        ),
    ]
