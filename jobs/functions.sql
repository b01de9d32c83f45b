-- The current text of every database function and trigger the jobs app owns: the one place to read
-- them. The migrations made them (a migration that changes one carries its whole new text and this
-- file changes with it); tests/engine/test_functions.py checks that what the migrated database runs
-- is exactly this (pg_get_functiondef and pg_get_triggerdef, up to whitespace), and that every
-- function and trigger of the database stands in one of these files.
--
-- A definition begins at ``-- name: <name>`` (a trigger's name ends in ``_trigger``), the comment
-- lines after it are its documentation (read by jobs/sql.py, as for queries.sql).


-- name: leitstand_now
-- The database's clock: every lease, schedule and history time of the engine is read from it, so
-- all hosts agree whatever their own clocks say. (The test suite installs a clock it can move into
-- its own database, tests/support/db.py.)
CREATE OR REPLACE FUNCTION leitstand_now()
 RETURNS timestamp with time zone
 LANGUAGE sql
AS $$
    SELECT clock_timestamp()
$$;


-- name: jobs_transition_append_only
-- The transition log is append-only: an UPDATE or DELETE is refused, except a DELETE by the table's
-- owner with leitstand.allow_purge on (leitstand_log_purge, retention's partition moves).
CREATE OR REPLACE FUNCTION jobs_transition_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('leitstand.allow_purge', true) = 'on'
       AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'jobs_transition is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;


-- name: jobs_transition_webhook_outbox
-- The webhook outbox: a job that reached done, dead or ready_for_review gets its event in the
-- statement that logged the transition (jobs/webhooks.py delivers them).
CREATE OR REPLACE FUNCTION jobs_transition_webhook_outbox()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO jobs_webhookevent (kind, job_id, transition_id, occurred_at, data)
    SELECT 'job.' || added.to_state, added.job_id, added.id, added.at, '{}'::jsonb
    FROM added WHERE added.to_state IN ('done', 'dead', 'ready_for_review');
    RETURN NULL;
END
$$;


-- name: jobs_transition_batch_counters
-- A batch's counters, sharded by backend (16 shards): each logged transition of a member moves
-- its counts from the state it left to the state it reached, in the statement that logged it.
CREATE OR REPLACE FUNCTION jobs_transition_batch_counters()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO jobs_batchcounter AS c (batch_id, shard, total, done, failed, dead, in_review,
                                        rechecking, cancelled)
    SELECT j.batch_id, (pg_backend_pid() % 16)::smallint, count(*) FILTER (WHERE a.from_state = ''),
           sum((a.to_state = 'done')::int - (a.from_state = 'done')::int),
           sum((a.to_state = 'failed')::int - (a.from_state = 'failed')::int),
           sum((a.to_state = 'dead')::int - (a.from_state = 'dead')::int),
           sum((a.to_state = 'ready_for_review')::int - (a.from_state = 'ready_for_review')::int),
           sum((a.to_state = 'recheck_due')::int - (a.from_state = 'recheck_due')::int),
           sum((a.to_state = 'cancelled')::int - (a.from_state = 'cancelled')::int)
    FROM added a JOIN jobs_job j ON j.id = a.job_id
    WHERE j.batch_id IS NOT NULL
      AND (a.from_state IN ('', 'done', 'failed', 'dead', 'ready_for_review', 'recheck_due', 'cancelled')
           OR a.to_state IN ('done', 'failed', 'dead', 'ready_for_review', 'recheck_due', 'cancelled'))
    GROUP BY j.batch_id ORDER BY j.batch_id
    ON CONFLICT (batch_id, shard) DO UPDATE SET
        total = c.total + EXCLUDED.total, done = c.done + EXCLUDED.done, failed = c.failed + EXCLUDED.failed,
        dead = c.dead + EXCLUDED.dead, in_review = c.in_review + EXCLUDED.in_review,
        rechecking = c.rechecking + EXCLUDED.rechecking, cancelled = c.cancelled + EXCLUDED.cancelled;
    RETURN NULL;
END
$$;


-- name: leitstand_log_purge
-- Delete an append-only log's rows older than before (never the last day): the one way past the
-- append-only triggers; owned by the owner (SECURITY DEFINER), run only by the maintenance role.
CREATE OR REPLACE FUNCTION leitstand_log_purge(log regclass, before timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
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


-- name: jobs_transition_append_only_trigger
-- Refuses every UPDATE and DELETE of a logged transition (partitions inherit it).
CREATE TRIGGER jobs_transition_append_only
    BEFORE DELETE OR UPDATE ON jobs_transition
    FOR EACH ROW
    EXECUTE FUNCTION jobs_transition_append_only();


-- name: jobs_transition_batch_counters_trigger
-- Counts each statement's logged transitions into their batches.
CREATE TRIGGER jobs_transition_batch_counters
    AFTER INSERT ON jobs_transition
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_transition_batch_counters();


-- name: jobs_transition_webhook_outbox_trigger
-- Writes the webhook events of each statement's logged transitions.
CREATE TRIGGER jobs_transition_webhook_outbox
    AFTER INSERT ON jobs_transition
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_transition_webhook_outbox();


-- name: jobs_flow_lanes_touch
-- The flow lanes of these jobs, those of them planned: each lane is created (at its pool lane's
-- virtual time; the pool lane's clock too) or has its next due time lowered to theirs, and one that was idle comes back at the
-- pool lane's virtual time (no credit for the time it had nothing). The lanes are locked FOR KEY
-- SHARE first, so that jobs_flow_lanes_refresh (FOR UPDATE) never raises a next due time past a job
-- this transaction planned: it waits for this transaction, then sees the job. Lanes in key order.
-- Runs as the tables' owner (lane bookkeeping only; names in full): the application's writers need
-- no privilege on the lanes to plan a job, also while a migration adds them.
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


-- name: jobs_flow_lanes_refresh
-- The next due time of these flow lanes, read again from their planned jobs (NULL when none is
-- planned): the claim found fewer due jobs in them than their hint said. Each is locked FOR UPDATE
-- first (a lane a planner holds is skipped: it is being touched), and the jobs are read after the
-- lock, so no job a planner committed is missed — under READ COMMITTED, where each statement sees
-- what committed before it; any other isolation level is refused. Returns how many lanes changed.
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


-- name: jobs_transition_flow_lanes
-- Every job a statement planned (created, released, its retry due, sent back by a person) has its
-- flow lane touched in that statement's transaction (jobs_flow_lanes_touch).
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


-- name: jobs_transition_flow_lanes_trigger
-- Touches the flow lanes of the jobs each statement planned.
CREATE TRIGGER jobs_transition_flow_lanes
    AFTER INSERT ON jobs_transition
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_transition_flow_lanes();


-- name: dashboard_append_only
-- The audit log is append-only, as the transition log is (a DELETE only by the owner with
-- leitstand.allow_purge on: leitstand_log_purge).
CREATE OR REPLACE FUNCTION dashboard_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('leitstand.allow_purge', true) = 'on'
       AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;


-- name: dashboard_auditentry_append_only_trigger
-- Refuses every UPDATE and DELETE of an audit entry.
CREATE TRIGGER dashboard_auditentry_append_only
    BEFORE DELETE OR UPDATE ON dashboard_auditentry
    FOR EACH ROW
    EXECUTE FUNCTION dashboard_append_only();
