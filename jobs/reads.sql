-- Every read of the engine's tables that the layers above make in SQL of their own (the runtime's
-- supervisor, dispatch and sizing; the console's snapshot, metrics, dead letters, trends, paths,
-- storage and retention), complete, named and documented, beside the engine's own statements
-- (queries.sql). jobs/reads.py runs them; nothing outside jobs/ names a jobs_* table
-- (tests/engine/test_sql.py checks it).
--
-- States and outcomes are never written by hand: ``{state.PLANNED}``, ``{states.TERMINAL}``,
-- ``{outcome.FAILED}`` and ``{step_outcome.OK}`` are rendered from the declarations in
-- jobs/models.py when the file is read, as literals, so that PostgreSQL matches the partial indexes
-- built on the same declarations (a parameter would hide the state from the planner's proof).
-- Database time is passed in as %(now)s where a statement compares with it: leitstand_now() is
-- volatile, and in a WHERE clause it keeps PostgreSQL from using an index.


-- name: open_counts
-- (type, state, count) of open jobs, exact, through the partial index over the open set.
SELECT type, state, count(*) FROM jobs_job WHERE NOT (state IN {states.TERMINAL}) GROUP BY type, state


-- name: terminal_counts
-- (type, state, count) of ended jobs: millions of rows, so the console counts them seldom.
SELECT type, state, count(*) FROM jobs_job WHERE state IN {states.TERMINAL} GROUP BY type, state


-- name: oldest_due_per_type
-- (type, seconds) the oldest due planned job of each of %(types)s has waited by %(now)s: one index
-- descent per type (a GROUP BY would read every planned entry); NULL for a type without one.
SELECT t.type, extract(epoch FROM %(now)s - (SELECT min(j.due_at) FROM jobs_job AS j
    WHERE j.type = t.type AND j.state = {state.PLANNED} AND j.due_at <= %(now)s))
FROM unnest(%(types)s::text[]) AS t(type)


-- name: ended_per_bucket
-- (type, state, bucket, count) of jobs that ended within %(span)s seconds before %(now)s, in buckets
-- of %(size)s seconds counted back from %(now)s.
SELECT type, state, floor(extract(epoch FROM %(now)s - finished_at) / %(size)s)::int, count(*)
FROM jobs_job WHERE finished_at > %(now)s - %(span)s * interval '1 second'
GROUP BY 1, 2, 3


-- name: run_times_per_type
-- (type, p50 ms, p95 ms, attempts, attempts that failed) over the newest %(sample)s ended attempts.
SELECT j.type, percentile_cont(0.5) WITHIN GROUP (ORDER BY a.ms),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY a.ms), count(*),
       count(*) FILTER (WHERE a.outcome IN ({outcome.FAILED}, {outcome.LEASE_EXPIRED}, {outcome.WORKER_DIED}))
FROM (SELECT job_id, outcome, extract(epoch FROM finished_at - started_at) * 1000 AS ms
      FROM jobs_attempt WHERE finished_at IS NOT NULL AND started_at IS NOT NULL
      ORDER BY id DESC LIMIT %(sample)s) AS a
JOIN jobs_job AS j ON j.id = a.job_id GROUP BY j.type


-- name: stale_writes_last_hour
-- How many writes of stale attempts were refused in the hour before %(now)s.
SELECT count(*) FROM jobs_stalewrite WHERE at > %(now)s - interval '1 hour'


-- name: review_backlog
-- The review backlog: its cases, and the seconds the oldest has waited by %(now)s.
SELECT count(*), extract(epoch FROM %(now)s - min(state_changed_at)) FROM jobs_job
WHERE state = {state.READY_FOR_REVIEW}


-- name: jobs_row_estimate
-- The planner's estimate of the job table's rows (no scan).
SELECT reltuples FROM pg_class WHERE oid = 'jobs_job'::regclass


-- name: stuck_leases_per_pool
-- (pool, count) of leases that expired more than %(grace)s seconds before %(now)s and were not
-- released yet (the reaper's work still to do).
SELECT pool, count(*) FROM jobs_job
WHERE state IN {states.LEASED} AND lease_expires_at < %(now)s - %(grace)s * interval '1 second'
GROUP BY pool


-- name: due_count_capped
-- Due planned jobs of pool %(pool)s, counted up to %(cap)s (an exact count is never needed).
SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE state = {state.PLANNED} AND pool = %(pool)s
                      AND due_at <= leitstand_now() LIMIT %(cap)s) AS due


-- name: lane_depth_capped
-- Planned jobs of pool %(pool)s in lane %(priority)s, due or not, counted up to %(cap)s (the API's
-- bound on the bulk lane: an exact count is never needed). job_claim_idx holds exactly these.
SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE state = {state.PLANNED} AND pool = %(pool)s
                      AND priority = %(priority)s LIMIT %(cap)s) AS lane


-- name: lane_client_depth_capped
-- Planned jobs of client %(client)s in lane %(priority)s of pool %(pool)s, counted up to %(cap)s (a
-- client's share of the API's bulk lane; job_client_open_idx, the client's open jobs).
SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE client_id = %(client)s AND state = {state.PLANNED}
                      AND pool = %(pool)s AND priority = %(priority)s LIMIT %(cap)s) AS lane


-- name: lane_clients
-- The clients with planned jobs in lane %(priority)s of pool %(pool)s (the shares of a full bulk lane;
-- read only while it is full: one pass over the lane's entries of job_claim_idx).
SELECT count(DISTINCT client_id) FROM jobs_job WHERE state = {state.PLANNED} AND pool = %(pool)s
                                                 AND priority = %(priority)s


-- name: client_open_jobs_capped
-- Open jobs (not done, dead or cancelled) of client %(client)s, counted up to %(cap)s
-- (job_client_open_idx: the API's bound on a client's open jobs; an exact count is never needed).
SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE client_id = %(client)s AND NOT (state IN {states.TERMINAL})
                      LIMIT %(cap)s) AS open


-- name: pool_has_due_work
-- Whether pool %(pool)s has a due planned job, and whether it is paused.
SELECT EXISTS (SELECT 1 FROM jobs_job WHERE state = {state.PLANNED} AND pool = %(pool)s
               AND due_at <= leitstand_now()),
       EXISTS (SELECT 1 FROM workers_pool WHERE name = %(pool)s AND is_paused)


-- name: expired_lease_types
-- The types of leased jobs whose lease expired more than %(grace)s seconds ago (database time): the
-- reaper's one walk of the leased set (job_leased_idx) before it releases them type by type, each
-- with its retry policy, instead of one walk per registered type.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now)
SELECT DISTINCT j.type FROM jobs_job AS j, clock
WHERE j.state IN {states.LEASED} AND j.lease_expires_at < clock.now - %(grace)s * interval '1 second'


-- name: lease_owners_silent
-- The lease owners on host %(host)s (a prefix "host:") whose leased jobs missed their heartbeats
-- for %(silent)s seconds: workers that may be gone.
SELECT DISTINCT lease_owner FROM jobs_job WHERE state IN {states.LEASED}
AND starts_with(lease_owner, %(host)s) AND heartbeat_at < leitstand_now() - %(silent)s * interval '1 second'


-- name: attempt_newest_id
-- The highest attempt ID (0 without attempts): where pool_busy_time's window of the newest ends.
SELECT coalesce(max(id), 0) FROM jobs_attempt


-- name: pool_busy_time
-- (pool, attempts, busy seconds) of the attempts above ID %(above)s (the newest so many: the caller
-- reads attempt_newest_id first) of pools %(pools)s that ended after %(since)s with one of
-- %(outcomes)s. The bound arrives as a value the planner sizes from the key's statistics; as a
-- subquery it cannot, and assumes a third of the table (bench.soak at 10 M attempts: the batches
-- page 52 → 956 ms by the end of the run).
SELECT pool, count(*), coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)
FROM jobs_attempt
WHERE id > %(above)s AND pool = ANY(%(pools)s)
  AND finished_at > %(since)s AND started_at IS NOT NULL AND outcome = ANY(%(outcomes)s)
GROUP BY pool


-- name: dead_letter_groups
-- The dead jobs grouped by (type, error class, the step their final attempt ended in, processing
-- version), with the counts that died after each of %(since_0)s … %(since_4)s (the dead-letter
-- page's five windows), the total, the first and last death and the newest job's ID; only the jobs
-- of batch %(batch)s when it is not NULL. The final attempt's signature is read by one index probe
-- per dead job (a subplan: a join would hash the whole attempts table), and the groups are hashed,
-- not sorted: the newest job of a group is the maximum of a sortable text (UTC time, then the ID).
SELECT type, error_class, step, processing_version,
       count(*) FILTER (WHERE finished_at > %(since_0)s), count(*) FILTER (WHERE finished_at > %(since_1)s),
       count(*) FILTER (WHERE finished_at > %(since_2)s), count(*) FILTER (WHERE finished_at > %(since_3)s),
       count(*) FILTER (WHERE finished_at > %(since_4)s),
       count(*), min(finished_at), max(finished_at),
       split_part(max(coalesce(to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), '')
                      || '|' || id), '|', 2)
FROM (
    SELECT j.id, j.type, j.error_class, j.processing_version, j.finished_at,
           coalesce(substring((SELECT a.path_signature FROM jobs_attempt AS a
                               WHERE a.job_id = j.id AND a.lease_version = j.lease_version)
                              from '([a-z][a-z0-9_]*)[!~]? -> '), '') AS step
    FROM jobs_job AS j
    WHERE j.state = {state.DEAD} AND (%(batch)s::bigint IS NULL OR j.batch_id = %(batch)s::bigint)
) AS dead
GROUP BY 1, 2, 3, 4


-- name: ended_in_minute
-- (type, state, count) of the jobs that ended done or dead in [%(start)s, %(end)s).
SELECT type, state, count(*) FROM jobs_job
WHERE finished_at >= %(start)s AND finished_at < %(end)s AND state IN ({state.DONE}, {state.DEAD})
GROUP BY 1, 2


-- name: oldest_job_times
-- When the oldest job was created and the first one ended: each follows an index from its low end
-- (job_created_idx, job_finished_idx), one row read each.
SELECT (SELECT created_at FROM jobs_job ORDER BY created_at LIMIT 1),
       (SELECT finished_at FROM jobs_job WHERE finished_at IS NOT NULL ORDER BY finished_at LIMIT 1)


-- name: retention_trees
-- Retention's next %(limit)s job trees after the cursor (%(after_at)s, %(after_id)s) whose root ended
-- before %(horizon)s and is not archived yet: every member with what the retention rules need
-- (its batch open, a recheck plan and when it ended, a finding). One statement per round.
WITH RECURSIVE roots AS (
    SELECT j.id, j.finished_at FROM jobs_job AS j
    WHERE j.parent_id IS NULL AND j.finished_at < %(horizon)s AND (j.finished_at, j.id) > (%(after_at)s, %(after_id)s)
      AND NOT EXISTS (SELECT 1 FROM dashboard_archivedjob AS a WHERE a.job_id = j.id)
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
tree AS (
    SELECT id AS root, id FROM roots
    UNION ALL
    SELECT tree.root, child.id FROM jobs_job AS child JOIN tree ON child.parent_id = tree.id
)
SELECT tree.root, j.id, j.type, j.state, j.finished_at, j.correlation_id,
       j.batch_id IS NOT NULL AND b.finished_at IS NULL AS batch_open,
       p.id IS NOT NULL AS has_plan, p.ended_at AS plan_ended_at,
       EXISTS (SELECT 1 FROM workers_finding AS f WHERE f.job_id = j.id) AS has_finding,
       roots.finished_at AS root_finished_at
FROM tree
JOIN jobs_job AS j ON j.id = tree.id
JOIN roots ON roots.id = tree.root
LEFT JOIN jobs_batch AS b ON b.id = j.batch_id
LEFT JOIN rechecks_recheckplan AS p ON p.job_id = j.id


-- name: path_groups
-- The newest %(window)s checked attempts of type %(type)s grouped by path: (signature, conforms,
-- divergence kind, count, a divergence, median duration).
WITH recent AS MATERIALIZED (
    SELECT path_signature, path_conforms, path_divergence, path_divergence_kind, duration_ms
    FROM jobs_attempt WHERE path_checked AND job_type = %(type)s ORDER BY id DESC LIMIT %(window)s
)
SELECT path_signature, path_conforms, path_divergence_kind, count(*), max(path_divergence),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms)
FROM recent GROUP BY 1, 2, 3 ORDER BY 4 DESC


-- name: path_flagged
-- Of the newest %(window)s checked attempts of type %(type)s, the newest 100 that diverged or were slow.
WITH recent AS MATERIALIZED (
    SELECT id, job_id, lease_version, path_signature, path_conforms, path_divergence, path_divergence_kind,
           duration_ms, slow, slow_reason, finished_at
    FROM jobs_attempt WHERE path_checked AND job_type = %(type)s ORDER BY id DESC LIMIT %(window)s
)
SELECT id, job_id, lease_version, path_signature, path_conforms, path_divergence, path_divergence_kind,
       duration_ms, slow, slow_reason, finished_at
FROM recent WHERE path_conforms = false OR slow ORDER BY id DESC LIMIT 100


-- name: path_funnel
-- Per step of the newest %(funnel)s checked attempts of type %(type)s: (step, count, ok, skipped,
-- failed, deferred, p50 ms, p99 ms). LATERAL … OFFSET 0: one probe of stepevent_job_idx per attempt
-- (without the fence the planner prefers a hash join that reads every step event).
WITH recent AS MATERIALIZED (
    SELECT id, job_id, lease_version
    FROM jobs_attempt WHERE path_checked AND job_type = %(type)s ORDER BY id DESC LIMIT %(funnel)s
)
SELECT s.step, count(*),
       count(*) FILTER (WHERE s.outcome = {step_outcome.OK}), count(*) FILTER (WHERE s.outcome = {step_outcome.SKIPPED}),
       count(*) FILTER (WHERE s.outcome = {step_outcome.FAILED}), count(*) FILTER (WHERE s.outcome = {step_outcome.DEFERRED}),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY s.duration_ms),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY s.duration_ms)
FROM recent AS r
CROSS JOIN LATERAL (SELECT step, outcome, duration_ms FROM jobs_stepevent
                    WHERE job_id = r.job_id AND lease_version = r.lease_version OFFSET 0) s
GROUP BY s.step


-- name: client_keys
-- Every API client's ID, name (its keys' namespace), most urgent lane and whether its trace context is trusted, as the
-- API's token statements join it to the token they check (``JOIN (<this>) AS c ON c.id =
-- t.client_id``): the token, its client and its budget counts are one round trip a request.
SELECT id, name, most_urgent_lane, trace_trusted FROM jobs_client


-- name: flow_keys_of_pool
-- One page of pool %(pool)s's flow keys in key order, after %(after)s (NULL: from the first, the key
-- '' included), at most %(limit)s: those with a lane (work planned now or before) or an operator's
-- settings; with %(one)s only the key %(key)s. Per key: its planned jobs (counted up to 10,000 per
-- lane), its oldest due time, its jobs holding leases, its settings, its least virtual time
-- among its lanes with due work, its rate limit and bucket, and the database's time. The page comes from flowlane_once (pool, key, priority) and
-- flowkey_once_per_pool in key order: fast at any number of keys.
WITH page AS (
    SELECT %(key)s::text AS key WHERE %(one)s
    UNION ALL
    (SELECT DISTINCT key FROM (
        (SELECT key FROM jobs_flowlane WHERE pool = %(pool)s AND (%(after)s::text IS NULL OR key > %(after)s)
         ORDER BY key LIMIT %(limit)s * 10)
        UNION ALL
        (SELECT key FROM jobs_flowkey WHERE pool = %(pool)s AND (%(after)s::text IS NULL OR key > %(after)s)
         ORDER BY key LIMIT %(limit)s)
    ) AS keys
    WHERE NOT %(one)s
    ORDER BY key LIMIT %(limit)s)
)
SELECT page.key,
       coalesce((SELECT sum((SELECT count(*) FROM (SELECT 1 FROM jobs_job AS j
                                                 WHERE j.state = {state.PLANNED} AND j.pool = %(pool)s
                                                   AND j.priority = l.priority AND j.flow_key = l.key
                                                 LIMIT 10000) AS w))
                 FROM jobs_flowlane AS l WHERE l.pool = %(pool)s AND l.key = page.key), 0)::bigint,
       (SELECT min(l.next_due) FROM jobs_flowlane AS l WHERE l.pool = %(pool)s AND l.key = page.key),
       (SELECT count(*) FROM jobs_job AS j
        WHERE j.state IN {states.LEASED} AND j.pool = %(pool)s AND j.flow_key = page.key),
       k.max_running, coalesce(k.weight, 1), coalesce(k.paused, false), coalesce(k.reason, ''),
       (SELECT min(l.vtime) FROM jobs_flowlane AS l
        WHERE l.pool = %(pool)s AND l.key = page.key AND l.next_due IS NOT NULL),
       k.rate_starts, k.rate_seconds, k.rate_tat, leitstand_now()
FROM page LEFT JOIN jobs_flowkey AS k ON k.pool = %(pool)s AND k.key = page.key
ORDER BY page.key


-- name: flow_running_by_key
-- (pool, flow key, jobs holding leases) for every key with a lease: the leased set is small
-- (job_leased_idx), whatever the number of keys.
SELECT pool, flow_key, count(*) FROM jobs_job WHERE state IN {states.LEASED} GROUP BY pool, flow_key


-- name: flow_keys_due_by_pool
-- (pool, keys with due work) by %(now)s: lanes whose next due time has come (flowlane_turn_idx).
SELECT pool, count(DISTINCT key) FROM jobs_flowlane WHERE next_due <= %(now)s GROUP BY pool
