"""Flow keys (issue 39: fair shares, running limits and pauses per key inside a pool).

- ``jobs_job.flow_key``: what a job shares its pool by, set at creation from its type's declaration
  (existing jobs: '', one line per pool lane, as before).
- ``jobs_flowkey``: an operator's settings per key (weight, running limit, pause);
  ``jobs_flowlane``: the engine's line per (pool, lane, key) — its virtual time and next due time;
  ``jobs_flowclock``: each pool lane's virtual time.
- The trigger that touches a job's flow lane in the statement that plans it, and the function that
  reads a lane's next due time again (jobs/functions.sql); the lanes of the jobs already planned.
- ``job_flow_idx`` (pool, priority, flow_key, due_at, id) over planned jobs: a lane's next jobs;
  ``job_leased_idx`` becomes (pool, flow_key, id), so the claim counts what holds leases per key.

Columns are added briefly, indexes built and dropped concurrently (jobs/online.py)."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

import jobs.models
from jobs.online import AddFieldBriefly

TOUCH = """
CREATE OR REPLACE FUNCTION jobs_flow_lanes_touch(ids uuid[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    pools text[];
    priorities smallint[];
    keys text[];
    dues timestamptz[];
BEGIN
    SELECT array_agg(w.pool ORDER BY w.pool, w.priority, w.flow_key),
           array_agg(w.priority ORDER BY w.pool, w.priority, w.flow_key),
           array_agg(w.flow_key ORDER BY w.pool, w.priority, w.flow_key),
           array_agg(w.due ORDER BY w.pool, w.priority, w.flow_key)
    INTO pools, priorities, keys, dues
    FROM (SELECT j.pool, j.priority, j.flow_key, min(j.due_at) AS due FROM public.jobs_job AS j
          WHERE j.id = ANY(ids) AND j.state = 'planned' GROUP BY j.pool, j.priority, j.flow_key) AS w;
    IF pools IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO public.jobs_flowlane (pool, priority, key, vtime, next_due)
    SELECT w.pool, w.priority, w.key,
           coalesce((SELECT c.vtime FROM public.jobs_flowclock AS c WHERE c.pool = w.pool AND c.priority = w.priority), 0),
           w.due
    FROM unnest(pools, priorities, keys, dues) AS w(pool, priority, key, due)
    ON CONFLICT (pool, priority, key) DO NOTHING;
    IF FOUND THEN  -- a new lane: its pool lane's clock, unless it has one
        INSERT INTO public.jobs_flowclock (pool, priority, vtime)
        SELECT DISTINCT w.pool, w.priority, 0::float8 FROM unnest(pools, priorities) AS w(pool, priority)
        ON CONFLICT (pool, priority) DO NOTHING;
    END IF;
    PERFORM 1 FROM public.jobs_flowlane AS l JOIN unnest(pools, priorities, keys) AS w(pool, priority, key)
        ON l.pool = w.pool AND l.priority = w.priority AND l.key = w.key
    ORDER BY l.pool, l.priority, l.key FOR KEY SHARE OF l;
    UPDATE public.jobs_flowlane AS l
    SET next_due = w.due,
        vtime = CASE WHEN l.next_due IS NULL THEN greatest(l.vtime, coalesce(
            (SELECT c.vtime FROM public.jobs_flowclock AS c WHERE c.pool = l.pool AND c.priority = l.priority), 0))
            ELSE l.vtime END
    FROM unnest(pools, priorities, keys, dues) AS w(pool, priority, key, due)
    WHERE l.pool = w.pool AND l.priority = w.priority AND l.key = w.key
      AND (l.next_due IS NULL OR l.next_due > w.due);
END
$$;
"""
REFRESH = """
CREATE OR REPLACE FUNCTION jobs_flow_lanes_refresh(lanes bigint[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    locked bigint[];
    changed integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobs_flow_lanes_refresh reads the jobs after its lock: it needs READ COMMITTED'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    locked := ARRAY(SELECT l.id FROM public.jobs_flowlane AS l WHERE l.id = ANY(lanes) ORDER BY l.id FOR UPDATE SKIP LOCKED);
    UPDATE public.jobs_flowlane AS l SET next_due = found.due
    FROM (SELECT f.id, (SELECT min(j.due_at) FROM public.jobs_job AS j
                        WHERE j.state = 'planned' AND j.pool = f.pool AND j.priority = f.priority
                          AND j.flow_key = f.key) AS due
          FROM public.jobs_flowlane AS f WHERE f.id = ANY(locked)) AS found
    WHERE l.id = found.id AND l.next_due IS DISTINCT FROM found.due;
    GET DIAGNOSTICS changed = ROW_COUNT;
    RETURN changed;
END
$$;
"""
TRIGGER_FUNCTION = """
CREATE OR REPLACE FUNCTION jobs_transition_flow_lanes()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM added WHERE added.to_state = 'planned') THEN
        PERFORM public.jobs_flow_lanes_touch(ARRAY(SELECT added.job_id FROM added WHERE added.to_state = 'planned'));
    END IF;
    RETURN NULL;
END
$$;
"""
TRIGGER = """
CREATE TRIGGER jobs_transition_flow_lanes
    AFTER INSERT ON jobs_transition
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_transition_flow_lanes();;
"""
# The lanes of the jobs planned before the trigger existed (the trigger's lock on jobs_transition
# waited for every transaction writing it, so what commits later is the trigger's).
LANES = """
INSERT INTO jobs_flowlane (pool, priority, key, vtime, next_due)
SELECT pool, priority, flow_key, 0, min(due_at) FROM jobs_job WHERE state = 'planned'
GROUP BY pool, priority, flow_key
ON CONFLICT (pool, priority, key) DO UPDATE SET next_due = least(jobs_flowlane.next_due, EXCLUDED.next_due);
INSERT INTO jobs_flowclock (pool, priority, vtime) SELECT DISTINCT pool, priority, 0 FROM jobs_flowlane
ON CONFLICT (pool, priority) DO NOTHING;
"""
DROP = """
DROP TRIGGER IF EXISTS jobs_transition_flow_lanes ON jobs_transition;
DROP FUNCTION IF EXISTS jobs_transition_flow_lanes();
DROP FUNCTION IF EXISTS jobs_flow_lanes_refresh(bigint[]);
DROP FUNCTION IF EXISTS jobs_flow_lanes_touch(uuid[]);
"""


class Migration(migrations.Migration):
    atomic = False  # CREATE and DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("jobs", "0034_attempt_span_and_log_lines")]

    operations = [
        AddFieldBriefly(
            model_name="job",
            name="flow_key",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.CreateModel(
            name="FlowClock",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pool", models.CharField(max_length=64)),
                ("priority", models.SmallIntegerField()),
                ("vtime", models.FloatField(default=0)),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("pool", "priority"), name="flowclock_once")],
            },
        ),
        migrations.CreateModel(
            name="FlowKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pool", models.CharField(max_length=64)),
                ("key", models.CharField(blank=True, max_length=255)),
                (
                    "weight",
                    models.PositiveSmallIntegerField(db_default=1, default=1, help_text="Its share against weight 1."),
                ),
                (
                    "max_running",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="At most this many of its jobs hold leases at once; empty: the default.",
                        null=True,
                    ),
                ),
                (
                    "paused",
                    models.BooleanField(db_default=False, default=False, help_text="None of its jobs is claimed."),
                ),
                ("reason", models.CharField(blank=True, db_default="", default="", max_length=500)),
                ("changed_by", models.CharField(blank=True, db_default="", default="", max_length=255)),
                ("changed_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("pool", "key"), name="flowkey_once_per_pool"),
                    models.CheckConstraint(
                        condition=models.Q(("weight__gte", 1), ("weight__lte", 1000)), name="flowkey_weight_1_to_1000"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="FlowLane",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pool", models.CharField(max_length=64)),
                ("priority", models.SmallIntegerField()),
                ("key", models.CharField(blank=True, max_length=255)),
                ("vtime", models.FloatField(default=0)),
                ("next_due", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("pool", "key", "priority"), name="flowlane_once"),
                ],
                "indexes": [
                    models.Index(
                        condition=models.Q(("next_due__isnull", False)),
                        fields=["pool", "priority", "vtime", "next_due"],
                        name="flowlane_turn_idx",
                    )
                ],
            },
        ),
        migrations.RunSQL(TOUCH + REFRESH + TRIGGER_FUNCTION + TRIGGER, DROP),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "planned")),
                fields=["pool", "priority", "flow_key", "due_at", "id"],
                name="job_flow_idx",
            ),
        ),
        migrations.RunSQL(LANES, migrations.RunSQL.noop),
        RemoveIndexConcurrently(model_name="job", name="job_leased_idx"),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state__in", ("reserved", "running"))),
                fields=["pool", "flow_key", "id"],
                name="job_leased_idx",
            ),
        ),
    ]
