-- Every statement the job engine runs (jobs/leases.py), complete, named and documented.
--
-- Names say what a statement does and the guard under which it does it (``_if_lease_held``: only the
-- attempt whose lease version is current, in a state the transition allows). Nothing here names a
-- job state or an attempt outcome: they arrive as parameters read from the django-fsm declaration
-- and ``Attempt.Outcome`` (jobs/models.py), so the SQL and the state machine cannot drift apart.
-- Every write by a lease holder that its guard refuses is recorded in the same statement
-- (``refused`` and ``refused_attempt``): a late or zombie worker is never silently ignored.
-- Lease and schedule arithmetic uses ``leitstand_now()`` (database time).
--
-- The file is read once by jobs/sql.py: a statement begins at ``-- name: <name>``, the comment
-- lines after it are its documentation, and it ends before the next name. A part several statements
-- share is a ``-- fragment: <name>``, put where a statement has the line ``-- include: <name>``.
-- Parameters are psycopg's ``%(name)s``.


-- fragment: refusal_recorded
-- The refusal of a fenced write, the same in every statement that makes one: each write of
-- ``input`` (id, lease_version) that ``changed`` does not hold was refused; it is recorded as a
-- stale write, with the job's current lease version and state, and counted on the writer's attempt.
-- Needs the CTEs ``clock``, ``input`` and ``changed`` before it; ends the WITH list.
refused AS (
    INSERT INTO jobs_stalewrite (job_id, lease_version, operation, at, current_lease_version, current_state)
    SELECT j.id, i.lease_version, %(operation)s, clock.now, j.lease_version, j.state
    FROM input AS i JOIN jobs_job AS j ON j.id = i.id CROSS JOIN clock
    WHERE NOT EXISTS (SELECT 1 FROM changed WHERE changed.id = i.id)
    RETURNING job_id, lease_version, current_lease_version, current_state
),
refused_attempt AS (
    UPDATE jobs_attempt AS a
    SET refused_writes = a.refused_writes + 1, last_refused_at = clock.now, last_refused_op = %(operation)s
    FROM refused, clock
    WHERE a.job_id = refused.job_id AND a.lease_version = refused.lease_version
)


-- fragment: named_jobs_locked
-- The bulk transitions' jobs: those of %(ids)s in a state of %(sources)s, at most %(limit)s, locked
-- in id order; a job locked by someone else is left alone. Ends with a comma: CTEs follow it.
target AS (
    -- By primary key, one lateral lookup per job (see jobs_store_results_if_lease_held).
    SELECT j.id, j.state
    FROM (SELECT DISTINCT id FROM unnest(%(ids)s::uuid[]) AS u(id) ORDER BY id) AS i
    CROSS JOIN LATERAL (
        SELECT j.id, j.state FROM jobs_job AS j
        WHERE j.id = i.id AND j.state = ANY(%(sources)s)
        FOR UPDATE SKIP LOCKED
    ) AS j
    LIMIT %(limit)s
),


-- name: job_insert_unless_key_exists
-- Insert a job in its initial state with its creation transition, unless its (type, key
-- namespace, idempotency key) exists. Returns the new job's row, or no row.
WITH created AS (
    INSERT INTO jobs_job (id, type, pool, key_namespace, idempotency_key, request_hash, client_id, correlation_id,
                          parent_id, batch_id, schema_version, priority, source, flow_key, subject, payload,
                          max_attempts, due_at, state, trace_parent, trace_state)
    VALUES (%(id)s, %(type)s, %(pool)s, %(key_namespace)s, %(idempotency_key)s, %(request_hash)s, %(client_id)s,
            %(correlation_id)s, %(parent_id)s, %(batch_id)s, %(schema_version)s, %(priority)s, %(source)s,
            %(flow_key)s, %(subject)s, %(payload)s, %(max_attempts)s, coalesce(%(due_at)s, leitstand_now()),
            %(state)s, %(trace_parent)s, %(trace_state)s)
    ON CONFLICT (type, key_namespace, idempotency_key) DO NOTHING
    RETURNING *
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT id, '', state, leitstand_now(), lease_version, 'created', %(actor)s FROM created
)
SELECT * FROM created


-- name: jobs_insert_many_unless_key_exists
-- Insert many jobs in their initial state with their creation transitions in one statement (a
-- batch's members: the statement-level triggers count them once), each unless its (type, key
-- namespace, idempotency key) exists — or came earlier in the same list. Arrays in input order;
-- %(parent_id)s: the parent of them all (a handler's children), or NULL. Returns the IDs inserted.
WITH input AS (
    -- Binary parameters (%%b): a thousand JSON texts are sent as they are, not escaped into an array literal.
    SELECT * FROM unnest(%(ids)b::uuid[], %(types)b::text[], %(pools)b::text[], %(keys)b::text[],
                         %(hashes)b::text[], %(schema_versions)b::int[], %(priorities)b::int[],
                         %(sources)b::text[], %(flow_keys)b::text[], %(subjects)b::text[],
                         %(payloads)b::text[]::jsonb[], %(max_attempts)b::int[])
        WITH ORDINALITY AS i(id, type, pool, idempotency_key, request_hash, schema_version, priority, source,
                             flow_key, subject, payload, max_attempts, position)
),
created AS (
    INSERT INTO jobs_job (id, type, pool, key_namespace, idempotency_key, request_hash, client_id, correlation_id,
                          parent_id, batch_id, schema_version, priority, source, flow_key, subject, payload,
                          max_attempts, due_at, state, trace_parent, trace_state)
    SELECT id, type, pool, %(key_namespace)s, idempotency_key, request_hash, %(client_id)s, %(correlation_id)s,
           %(parent_id)s::uuid, %(batch_id)s, schema_version, priority, source, flow_key, subject, payload,
           max_attempts, leitstand_now(), %(state)s, %(trace_parent)s, %(trace_state)s
    FROM input ORDER BY position
    ON CONFLICT (type, key_namespace, idempotency_key) DO NOTHING
    RETURNING id, state, lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT id, '', state, leitstand_now(), lease_version, 'created', %(actor)s FROM created
)
SELECT id FROM created


-- name: jobs_by_keys
-- The jobs that hold these (type, idempotency key) pairs in one key namespace: what a repeat of a
-- bulk submission names.
SELECT j.id, j.type, j.idempotency_key, j.request_hash, j.payload, j.batch_id
FROM unnest(%(types)s::text[], %(keys)s::text[]) AS k(type, idempotency_key)
JOIN jobs_job AS j ON j.type = k.type AND j.key_namespace = %(key_namespace)s AND j.idempotency_key = k.idempotency_key


-- name: flow_lanes_due
-- The lanes of pool %(pool)s with due work a claim may serve (flowlane_turn_idx), most urgent lane
-- first, then the least served: at most %(window)s of them (more than a claim of %(limit)s can use:
-- a lane whose hint was early has no due job, and is read again instead).
-- A paused key's are left out, and a resting key's (FlowRest); with %(limited)s (under
-- flow_claim_lock), so are those of a key that holds its limit: %(default_limit)s leases (not the
-- key '', which jobs of types that share their pool by no key have in common: one line, not one
-- key), or its own limit if an operator set one (NULL: no limit), and those of a key whose rate limit allows no start now. Each with its key's weight and
-- room (what it may still start: the least of its running room and its rate room; NULL: no limit),
-- its due jobs counted up to %(limit)s (job_flow_idx, from next_due on: no planned job of the lane
-- is due before it), next_due, its pool lane's clock, the time the rooms were read at, and whether
-- its key has a rate limit (whose bucket the claim then fills: flow_rates_charge). The
-- leases are counted from the jobs (job_leased_idx), right after any crash, as no counter would be.
-- A rate limit of r starts per T seconds is a bucket (GCRA): a key whose bucket is due at rate_tat
-- may start floor((T - (rate_tat - now)) * r / T) now, r at most (flow_rates_charge fills it).
WITH running AS MATERIALIZED (
    SELECT j.flow_key AS key, count(*) AS n FROM jobs_job AS j
    WHERE %(limited)s AND j.state = ANY(%(leased)s) AND j.pool = %(pool)s
    GROUP BY j.flow_key
),
clock AS MATERIALIZED (SELECT leitstand_now() AS now),
lanes AS (
    SELECT l.*, coalesce(k.weight, 1) AS weight, coalesce(k.paused, false) AS paused,
           k.rate_starts IS NOT NULL AS rated,
           CASE WHEN %(limited)s THEN least(
               coalesce(k.max_running, CASE WHEN l.key <> '' THEN %(default_limit)s::int END) - coalesce(r.n, 0),
               floor((k.rate_seconds - greatest(extract(epoch FROM k.rate_tat - (SELECT now FROM clock)), 0))
                     * k.rate_starts / k.rate_seconds + 1e-6)::int
           ) END AS room
    FROM jobs_flowlane AS l
    LEFT JOIN jobs_flowkey AS k ON k.pool = l.pool AND k.key = l.key
    LEFT JOIN running AS r ON r.key = l.key
    WHERE l.pool = %(pool)s AND l.next_due <= (SELECT now FROM clock)
      -- A key at rest (FlowRest: a host that may not be asked yet) waits, as a paused one does.
      AND NOT EXISTS (SELECT 1 FROM jobs_flowrest AS f
                      WHERE f.pool = l.pool AND f.key = l.key AND f.until > (SELECT now FROM clock))
)
SELECT l.id, l.priority, l.key, l.vtime, l.weight, l.room,
       (SELECT count(*) FROM (SELECT 1 FROM jobs_job AS j
                              WHERE j.state = %(source)s AND j.pool = %(pool)s AND j.priority = l.priority
                                AND j.flow_key = l.key AND j.due_at <= (SELECT now FROM clock)
                                AND j.due_at >= l.next_due
                              LIMIT %(limit)s) AS due),
       l.next_due,
       coalesce((SELECT c.vtime FROM jobs_flowclock AS c WHERE c.pool = l.pool AND c.priority = l.priority), 0),
       (SELECT now FROM clock), l.rated
FROM lanes AS l
WHERE NOT l.paused AND coalesce(l.room, 1) > 0
ORDER BY l.priority, l.vtime, l.next_due
LIMIT %(window)s


-- name: jobs_claim_due_skip_locked
-- Reserve the due jobs of pool %(pool)s that the fair share gave each lane (%(lanes)s, taking
-- %(takes)s of its oldest due; charged 1 / %(weights)s per job, 0: not charged): raise each one's lease version (the
-- attempt's ID and fencing token), insert its attempt and log the claim; with %(start)s also start
-- them (both transitions logged). Each lane moves on by 1 / weight per job, and its pool lane's
-- virtual time to the place of the last job served. Jobs another claimer locked are skipped.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
quota AS (
    SELECT * FROM unnest(%(lanes)s::bigint[], %(priorities)s::smallint[], %(keys)s::text[], %(takes)s::int[],
                         %(weights)s::int[], %(fronts)s::timestamptz[], %(starts)s::float8[])
        AS q(id, priority, key, take, weight, front, start)
),
picked AS MATERIALIZED (
    -- Each lane's oldest due jobs (job_flow_idx): both bounds on due_at are index conditions, so the
    -- entries before the lane's next_due (``front``: jobs claimed before, that vacuum may not have
    -- removed yet) are passed over inside the index, without a visit to the table.
    -- SKIP LOCKED: concurrent claimers take different jobs instead of waiting for each other.
    -- MATERIALIZED: the locking selection must run exactly once.
    SELECT j.id, q.id AS lane FROM quota AS q
    CROSS JOIN LATERAL (
        SELECT j.id FROM jobs_job AS j
        WHERE j.state = %(source)s AND j.pool = %(pool)s AND j.priority = q.priority AND j.flow_key = q.key
          AND j.due_at <= (SELECT now FROM clock) AND j.due_at >= q.front
        ORDER BY j.due_at, j.id
        LIMIT q.take
        FOR UPDATE SKIP LOCKED
    ) AS j
),
served AS (
    -- From where it started (its vtime, or the clock if that is further: no credit for the time it
    -- waited paused, limited or not yet due). Weight 0: a lane that had its priority to itself is
    -- not charged (it took nothing from anyone).
    UPDATE jobs_flowlane AS l SET vtime = greatest(l.vtime, quota.start) + taken.n::float8 / quota.weight
    FROM (SELECT lane, count(*) AS n FROM picked GROUP BY lane) AS taken JOIN quota ON quota.id = taken.lane
    WHERE l.id = taken.lane AND quota.weight > 0
    RETURNING l.priority, l.vtime - 1.0 / quota.weight AS last
),
clocked AS (
    UPDATE jobs_flowclock AS c SET vtime = greatest(c.vtime, last.at)
    FROM (SELECT served.priority, max(served.last) AS at FROM served GROUP BY served.priority) AS last
    WHERE c.pool = %(pool)s AND c.priority = last.priority
),
type_settings AS (
    SELECT * FROM unnest(%(types)s::text[], %(leases)s::float8[], %(versions)s::text[])
        AS t(type, lease_seconds, processing_version)
),
claimed AS (
    UPDATE jobs_job AS j
    SET state = %(final)s, lease_version = j.lease_version + 1, attempts = j.attempts + 1,
        lease_owner = %(owner)s,
        lease_expires_at = clock.now + coalesce(
            (SELECT t.lease_seconds FROM type_settings AS t WHERE t.type = j.type), %(default_lease)s
        ) * interval '1 second',
        heartbeat_at = clock.now, state_changed_at = clock.now, next_attempt_at = NULL,
        processing_version = CASE WHEN %(start)s THEN coalesce(
            (SELECT t.processing_version FROM type_settings AS t WHERE t.type = j.type), j.processing_version
        ) ELSE j.processing_version END
    FROM picked, clock
    WHERE j.id = picked.id
    RETURNING j.id, j.type, j.lease_version, j.attempts, j.max_attempts, j.payload, j.correlation_id,
              j.priority, j.schema_version, j.lease_expires_at, j.due_at, j.trace_parent, j.trace_state, picked.lane
),
attempt AS (
    INSERT INTO jobs_attempt (job_id, lease_version, job_type, lease_owner, worker_host, worker_pid, pool, claimed_at,
                              started_at, heartbeat_at, outcome, error_class, error_message, refused_writes,
                              last_refused_op)
    SELECT claimed.id, claimed.lease_version, claimed.type, %(owner)s, %(host)s, %(pid)s, %(pool)s, clock.now,
           CASE WHEN %(start)s THEN clock.now END, clock.now, '', '', '', 0, ''
    FROM claimed, clock
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT claimed.id, %(source)s, %(target)s, clock.now, claimed.lease_version, 'claimed', %(owner)s
    FROM claimed, clock
    UNION ALL
    SELECT claimed.id, %(target)s, %(final)s, clock.now, claimed.lease_version, 'handler started', %(owner)s
    FROM claimed, clock WHERE %(start)s
)
SELECT id, type, lease_version, attempts, max_attempts, payload, correlation_id, priority, schema_version,
       lease_expires_at, due_at, trace_parent, trace_state, lane
FROM claimed ORDER BY priority, due_at, id


-- name: flow_keys_limited
-- Whether an operator set a running limit or a rate limit on a key of pool %(pool)s.
SELECT EXISTS (SELECT 1 FROM jobs_flowkey
               WHERE pool = %(pool)s AND (max_running IS NOT NULL OR rate_starts IS NOT NULL))


-- name: flow_rates_charge
-- Fill the rate-limit buckets of pool %(pool)s's keys %(keys)s by the jobs each started (%(counts)s)
-- at %(now)s, the time flow_lanes_due read their room at (under flow_claim_lock, in the same
-- transaction): each start moves the bucket's due time on by rate_seconds / rate_starts, from now
-- if it lay before. Keys without a rate limit are left alone. Answers how many buckets it filled.
WITH filled AS (
    UPDATE jobs_flowkey AS k
    SET rate_tat = greatest(coalesce(k.rate_tat, %(now)s), %(now)s)
                   + make_interval(secs => n.starts * k.rate_seconds::float8 / k.rate_starts)
    FROM unnest(%(keys)s::text[], %(counts)s::int[]) AS n(key, starts)
    WHERE k.pool = %(pool)s AND k.key = n.key AND k.rate_starts IS NOT NULL
    RETURNING 1
)
SELECT count(*) FROM filled


-- name: flow_rests_set
-- Key %(key)s of pools %(pools)s starts nothing before %(until)s (FlowRest): one row per pool and key.
INSERT INTO jobs_flowrest (pool, key, until)
SELECT pool, %(key)s, %(until)s FROM unnest(%(pools)s::text[]) AS p(pool)
ON CONFLICT (pool, key) DO UPDATE SET until = EXCLUDED.until


-- name: flow_rest_next_end
-- Seconds until the first key of pool %(pool)s at rest (FlowRest) with due work and no job leased
-- may go on; NULL: no such key. What a worker that claimed nothing waits for (a key whose job is
-- still leased frees itself when that job ends, which its worker sees: job_leased_idx).
SELECT extract(epoch FROM min(f.until) - leitstand_now())::float8
FROM jobs_flowrest AS f
WHERE f.pool = %(pool)s AND f.until > leitstand_now()
  AND EXISTS (SELECT 1 FROM jobs_flowlane AS l WHERE l.pool = f.pool AND l.key = f.key AND l.next_due <= leitstand_now())
  AND NOT EXISTS (SELECT 1 FROM jobs_job AS j
                  WHERE j.pool = f.pool AND j.flow_key = f.key AND j.state = ANY(%(leased)s))


-- name: flow_claim_lock
-- The claim lock of pool %(pool)s until the transaction ends, taken where a running limit applies:
-- such claims take turns, each counting what holds leases after the one before committed, so
-- together they never exceed a limit.
SELECT pg_advisory_xact_lock(hashtextextended('leitstand.claim:' || %(pool)s, 0))


-- name: flow_lanes_touch
-- Touch the flow lanes of these jobs, those of them planned (jobs_flow_lanes_touch,
-- jobs/functions.sql): for a job moved in line, which logs no transition.
SELECT jobs_flow_lanes_touch(%(ids)s::uuid[])


-- name: flow_lanes_refresh
-- Read the next due time of these lanes again (jobs_flow_lanes_refresh, jobs/functions.sql): the
-- claim found fewer due jobs in them than their hint said. How many changed.
SELECT jobs_flow_lanes_refresh(%(lanes)s::bigint[])


-- name: job_start_if_lease_held
-- The handler begins: reserved → running, recording the handler version that runs it.
-- Every ``_if_lease_held`` statement returns one row: (written, from_state, to_state,
-- lease_expires_at, current_lease_version, current_state); the last two only when refused.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT id, state FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(sources)s)
    FOR UPDATE
),
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now,
        processing_version = coalesce(nullif(%(processing_version)s, ''), j.processing_version)
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.lease_expires_at
),
attempt AS (
    UPDATE jobs_attempt AS a SET started_at = clock.now
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
),
input AS (SELECT %(job_id)s::uuid AS id, %(lease_version)s::bigint AS lease_version),
-- include: refusal_recorded
SELECT EXISTS (SELECT 1 FROM changed),
       (SELECT from_state FROM changed), (SELECT to_state FROM changed), (SELECT lease_expires_at FROM changed),
       (SELECT current_lease_version FROM refused), (SELECT current_state FROM refused)


-- name: job_heartbeat_if_lease_held
-- Extend the lease by %(lease)s seconds from database time and record progress when given; no
-- state change, so no transition. A heartbeat lost in a database crash costs nothing (the next one
-- comes within seconds), so its transaction does not wait for its WAL flush (``synchronous_commit``
-- off, for this transaction only): half the cost of the most frequent write.
WITH durability AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
clock AS MATERIALIZED (SELECT leitstand_now() AS now FROM durability),
target AS (
    SELECT id, state FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(sources)s)
    FOR UPDATE
),
changed AS (
    UPDATE jobs_job AS j
    SET heartbeat_at = clock.now, lease_expires_at = clock.now + %(lease)s * interval '1 second',
        progress = coalesce(%(progress)s, j.progress)
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.lease_expires_at
),
attempt AS (
    UPDATE jobs_attempt AS a SET heartbeat_at = clock.now
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
input AS (SELECT %(job_id)s::uuid AS id, %(lease_version)s::bigint AS lease_version),
-- include: refusal_recorded
SELECT EXISTS (SELECT 1 FROM changed),
       (SELECT from_state FROM changed), (SELECT to_state FROM changed), (SELECT lease_expires_at FROM changed),
       (SELECT current_lease_version FROM refused), (SELECT current_state FROM refused)


-- name: job_store_result_if_lease_held
-- Executed and result written: running → %(target)s (result_stored, or recheck_due when a follow-up
-- decides the business outcome); the lease ends and the attempt with %(outcome)s.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT id, state FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(sources)s)
    FOR UPDATE
),
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now, result_ref = %(result_ref)s,
        result_checksum = %(result_checksum)s, lease_owner = '', lease_expires_at = NULL
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.lease_expires_at
),
attempt AS (
    UPDATE jobs_attempt AS a SET finished_at = clock.now, outcome = %(outcome)s
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
),
input AS (SELECT %(job_id)s::uuid AS id, %(lease_version)s::bigint AS lease_version),
-- include: refusal_recorded
SELECT EXISTS (SELECT 1 FROM changed),
       (SELECT from_state FROM changed), (SELECT to_state FROM changed), (SELECT lease_expires_at FROM changed),
       (SELECT current_lease_version FROM refused), (SELECT current_state FROM refused)


-- name: jobs_store_results_if_lease_held
-- A batch completion: each job of %(completions)s (one JSON document) whose lease version is
-- current stores its result, ends its lease and attempt (with the attempt's span and kept log lines),
-- and writes its step events (%(steps)s);
-- a settled one (the handler's rule decided the outcome) goes on to %(settled_state)s, both steps
-- logged. Each refused completion is recorded. Returns (written, job_id, from_state, to_state,
-- lease_version, current_lease_version, current_state) per job.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
input AS MATERIALIZED (
    -- The batch travels as one JSON document: far cheaper to send than a set of parallel arrays.
    SELECT * FROM jsonb_to_recordset(%(completions)s)
        AS i(id uuid, lease_version bigint, result_ref text, result_checksum text, target text, outcome text,
             cause text, settled text, trace_span text, log_lines jsonb)
),
target AS MATERIALIZED (
    -- One lookup by primary key per member, in id order (the order every locker takes rows in),
    -- written as a lateral lookup so that the planner cannot join against a scan of the leased set
    -- instead: its partial index keeps an entry for every job that ran since the oldest open
    -- transaction began (a long report or backup keeps hundreds of thousands), and such a scan
    -- visits them all (bench.horizon: 286,000 buffers for a completion of 100 jobs at the end of a
    -- four-minute pin). The bulk transitions below look their jobs up the same way.
    SELECT j.id, j.state, i.result_ref, i.result_checksum, i.target, i.outcome, i.cause, i.settled,
           i.trace_span, i.log_lines
    FROM (SELECT * FROM input ORDER BY id) AS i
    CROSS JOIN LATERAL (
        SELECT j.id, j.state FROM jobs_job AS j
        WHERE j.id = i.id AND j.lease_version = i.lease_version AND j.state = ANY(%(sources)s)
        FOR UPDATE
    ) AS j
),
changed AS (
    UPDATE jobs_job AS j
    SET state = CASE WHEN target.settled IS NULL THEN target.target ELSE %(settled_state)s END,
        state_changed_at = clock.now, result_ref = target.result_ref,
        result_checksum = target.result_checksum, lease_owner = '', lease_expires_at = NULL,
        finished_at = CASE WHEN target.settled IS NULL THEN j.finished_at ELSE clock.now END,
        completion_reason = coalesce(target.settled, j.completion_reason)
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.correlation_id,
              target.outcome, target.cause, target.target AS stored_state, target.settled,
              target.trace_span, target.log_lines
),
steps AS (
    -- Step events travel with the result, and are written only for the jobs whose write was entitled.
    INSERT INTO jobs_stepevent (job_id, lease_version, correlation_id, step, outcome, started_at, duration_ms, data)
    SELECT changed.id, changed.lease_version, changed.correlation_id, s.step, s.outcome, s.started_at,
           s.duration_ms, s.data
    FROM ROWS FROM (jsonb_to_recordset(%(steps)s)
             AS (job_id uuid, step text, outcome text, started_at timestamptz, duration_ms float8, data jsonb))
         WITH ORDINALITY AS s(job_id, step, outcome, started_at, duration_ms, data, n)
    JOIN changed ON changed.id = s.job_id
    ORDER BY s.n
),
attempt AS (
    UPDATE jobs_attempt AS a SET finished_at = clock.now, outcome = changed.outcome,
        trace_span = changed.trace_span, log_lines = changed.log_lines
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    -- A settled job logs both steps: the result was stored, then the handler's rule decided it.
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT t.id, t.from_state, t.to_state, clock.now, t.lease_version, t.cause, %(actor)s
    FROM (SELECT changed.id, changed.from_state, changed.stored_state AS to_state, changed.lease_version,
                 changed.cause, 1 AS n
          FROM changed
          UNION ALL
          SELECT changed.id, changed.stored_state, changed.to_state, changed.lease_version, changed.settled, 2
          FROM changed WHERE changed.settled IS NOT NULL
          ORDER BY id, n) AS t, clock
),
-- include: refusal_recorded
SELECT TRUE, id, from_state, to_state, lease_version, NULL::bigint, NULL::text FROM changed
UNION ALL
SELECT FALSE, job_id, NULL, NULL, lease_version, current_lease_version, current_state FROM refused


-- name: job_fail_if_lease_held
-- Record a failure and route it by its kind: unclear (%(is_unclear)s) → %(unclear)s (a person decides);
-- permanent (%(is_permanent)s) → %(dead)s at once; transient → %(failed)s with the next attempt after
-- %(delay)s seconds while retry budget is left (attempts < max_attempts, the condition of
-- ``Job.has_retry_budget``), else %(dead)s. The attempt's outcome names where the job went; the attempt
-- keeps its span (%(trace_span)s) and the log lines it kept (%(log_lines)s).
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT id, state FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(sources)s)
    FOR UPDATE
),
routed AS (
    SELECT target.id,
           CASE WHEN %(is_unclear)s THEN %(unclear)s
                WHEN %(is_permanent)s OR j.attempts >= j.max_attempts THEN %(dead)s
                ELSE %(failed)s END AS state
    FROM target JOIN jobs_job AS j ON j.id = target.id
),
changed AS (
    UPDATE jobs_job AS j
    SET state = routed.state, state_changed_at = clock.now,
        next_attempt_at = CASE WHEN routed.state = %(failed)s THEN clock.now + %(delay)s * interval '1 second' END,
        finished_at = CASE WHEN routed.state = %(dead)s THEN clock.now END,
        completion_reason = CASE
            WHEN %(is_permanent)s THEN 'permanent error: ' || %(error_class)s
            WHEN routed.state = %(dead)s
                THEN 'retry budget spent (' || j.attempts || ' of ' || j.max_attempts || ')'
            WHEN routed.state = %(failed)s THEN ''
            ELSE j.completion_reason END,
        error_class = %(error_class)s, error_message = %(message)s,
        lease_owner = '', lease_expires_at = NULL
    FROM target, routed, clock
    WHERE j.id = target.id AND routed.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.lease_expires_at
),
attempt AS (
    UPDATE jobs_attempt AS a
    SET finished_at = clock.now, error_class = %(error_class)s, error_message = %(message)s,
        trace_span = %(trace_span)s, log_lines = %(log_lines)s,
        outcome = CASE changed.to_state WHEN %(failed)s THEN %(outcome_failed)s
                                        WHEN %(dead)s THEN %(outcome_dead)s
                                        ELSE %(outcome_unclear)s END
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
),
input AS (SELECT %(job_id)s::uuid AS id, %(lease_version)s::bigint AS lease_version),
-- include: refusal_recorded
SELECT EXISTS (SELECT 1 FROM changed),
       (SELECT from_state FROM changed), (SELECT to_state FROM changed), (SELECT lease_expires_at FROM changed),
       (SELECT current_lease_version FROM refused), (SELECT current_state FROM refused)


-- name: job_release_if_lease_held
-- Hand the job back cleanly (on SIGTERM, or deferred while a host is busy): → %(target)s; the
-- attempt is not counted against the retry budget. Without a delay the job keeps its due time and so
-- its place in line; deferred by %(delay)s seconds, it is due that much later. The attempt keeps its
-- span and log lines as in a failure.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT id, state FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(sources)s)
    FOR UPDATE
),
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now,
        due_at = CASE WHEN %(delay)s > 0 THEN clock.now + %(delay)s * interval '1 second' ELSE j.due_at END,
        attempts = greatest(j.attempts - 1, 0), lease_owner = '', lease_expires_at = NULL
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.lease_expires_at
),
attempt AS (
    UPDATE jobs_attempt AS a SET finished_at = clock.now, outcome = %(outcome)s, error_message = %(reason)s,
        trace_span = %(trace_span)s, log_lines = %(log_lines)s
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
),
input AS (SELECT %(job_id)s::uuid AS id, %(lease_version)s::bigint AS lease_version),
-- include: refusal_recorded
SELECT EXISTS (SELECT 1 FROM changed),
       (SELECT from_state FROM changed), (SELECT to_state FROM changed), (SELECT lease_expires_at FROM changed),
       (SELECT current_lease_version FROM refused), (SELECT current_state FROM refused)


-- name: step_events_insert_if_lease_held
-- Write step events of the attempt that holds the lease; returns whether it holds it (a stale
-- attempt's events are not written; the caller records the refusal).
WITH holder AS (
    SELECT id, correlation_id FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(leased)s)
),
inserted AS (
    INSERT INTO jobs_stepevent (job_id, lease_version, correlation_id, step, outcome, started_at, duration_ms, data)
    SELECT holder.id, %(lease_version)s, holder.correlation_id, e.step, e.outcome, e.started_at, e.duration_ms, e.data
    FROM holder, unnest(%(steps)s::text[], %(outcomes)s::text[], %(starts)s::timestamptz[],
                        %(durations)s::float8[], %(data)s::jsonb[]) AS e(step, outcome, started_at, duration_ms, data)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM holder)


-- name: job_lock_if_lease_held
-- Lock the job row for the rest of the transaction if this attempt still holds its lease (writes
-- outside the job row: effects, spawned children), and read what a child inherits from it.
SELECT correlation_id, batch_id, client_id, key_namespace FROM jobs_job
WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(leased)s)
FOR UPDATE


-- name: stale_write_record
-- Record a write refused to a stale attempt outside the fenced statements (step events, effects,
-- spawns): a stale-write row and a count on that attempt. Returns the job's current lease version
-- and state.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
refused AS (
    INSERT INTO jobs_stalewrite (job_id, lease_version, operation, at, current_lease_version, current_state)
    SELECT j.id, %(lease_version)s, %(operation)s, clock.now, j.lease_version, j.state
    FROM jobs_job AS j, clock WHERE j.id = %(job_id)s
    RETURNING current_lease_version, current_state
),
refused_attempt AS (
    UPDATE jobs_attempt AS a
    SET refused_writes = a.refused_writes + 1, last_refused_at = clock.now, last_refused_op = %(operation)s
    FROM clock WHERE a.job_id = %(job_id)s AND a.lease_version = %(lease_version)s
)
SELECT current_lease_version, current_state FROM refused


-- name: jobs_reap_if_lease_expired
-- Release leases that expired more than %(grace)s seconds ago (of one type when %(job_type)s is
-- given), oldest first, skipping rows locked right now. The lost attempt counts against the retry
-- budget: with budget left the job waits in %(failed)s for its next attempt (full-jitter backoff of
-- the type's policy: %(base)s seconds doubling up to %(cap)s), else it goes to %(dead)s. Every sweep
-- returns (id, from_state, to_state, lease_version) per job it moved.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT j.id, j.state FROM jobs_job AS j, clock
    WHERE j.state = ANY(%(sources)s)
      AND j.lease_expires_at < clock.now - %(grace)s * interval '1 second'
      AND (%(job_type)s::text IS NULL OR j.type = %(job_type)s::text)
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
changed AS (
    UPDATE jobs_job AS j
    SET state = CASE WHEN j.attempts < j.max_attempts THEN %(failed)s ELSE %(dead)s END,
        next_attempt_at = CASE WHEN j.attempts < j.max_attempts THEN clock.now + random()
            * least(%(cap)s, %(base)s * power(2, least(greatest(j.attempts, 1) - 1, 60))) * interval '1 second' END,
        finished_at = CASE WHEN j.attempts < j.max_attempts THEN NULL ELSE clock.now END,
        completion_reason = CASE WHEN j.attempts < j.max_attempts THEN ''
            ELSE 'retry budget spent (' || j.attempts || ' of ' || j.max_attempts || '): lease expired' END,
        state_changed_at = clock.now, lease_owner = '', lease_expires_at = NULL,
        error_class = 'LeaseExpired',
        error_message = 'lease of ' || j.lease_owner || ' expired at ' || j.lease_expires_at
                        || '; last heartbeat at ' || coalesce(j.heartbeat_at::text, 'never')
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
attempt AS (
    UPDATE jobs_attempt AS a
    SET finished_at = clock.now, outcome = %(outcome)s, error_class = 'LeaseExpired',
        error_message = 'no heartbeat before the lease expired'
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version AND a.finished_at IS NULL
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: jobs_rescue_if_worker_died
-- Hand back at once the jobs held by %(owner)s, a worker process its supervisor saw die. Only the job
-- whose handler ran (%(running)s, or every job when %(all_ran)s) ended its attempt with the death
-- (%(outcome_died)s): after its first death it is %(planned)s again at once in its place in line;
-- from its second death on it waits out the type's backoff in %(failed)s; at %(poison)s deaths, or
-- with its retry budget spent, it is %(dead)s. The others only waited their turn: released to
-- %(planned)s without cost (%(outcome_released)s). Fenced by owner and leased state, row-locked, so
-- a result the process committed before it died stands.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT j.id, j.state FROM jobs_job AS j, clock
    WHERE j.state = ANY(%(sources)s)
      AND j.lease_owner = %(owner)s AND (%(job_type)s::text IS NULL OR j.type = %(job_type)s::text)
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
fate AS (
    -- deaths: this job's attempts that ended with their worker dying, this one included.
    SELECT t.id, t.ran, t.ran AND t.deaths > 1 AND t.deaths < %(poison)s AND t.has_budget AS after_backoff,
           NOT t.ran OR t.deaths <= 1 AND t.has_budget AS again_now, t.deaths
    FROM (SELECT j.id, (%(all_ran)s OR coalesce(j.id = %(running)s::uuid, FALSE)) AS ran,
                 j.attempts < j.max_attempts AS has_budget,
                 1 + (SELECT count(*) FROM jobs_attempt AS d
                      WHERE d.job_id = j.id AND d.outcome = %(outcome_died)s) AS deaths
          FROM target JOIN jobs_job AS j ON j.id = target.id) AS t
),
changed AS (
    UPDATE jobs_job AS j
    SET state = CASE WHEN fate.again_now THEN %(planned)s WHEN fate.after_backoff THEN %(failed)s ELSE %(dead)s END,
        attempts = CASE WHEN fate.ran THEN j.attempts ELSE greatest(j.attempts - 1, 0) END,
        next_attempt_at = CASE WHEN fate.after_backoff THEN clock.now + random()
            * least(%(cap)s, %(base)s * power(2, least(greatest(j.attempts, 1) - 1, 60))) * interval '1 second' END,
        finished_at = CASE WHEN fate.again_now OR fate.after_backoff THEN NULL ELSE clock.now END,
        completion_reason = CASE WHEN fate.again_now OR fate.after_backoff THEN ''
            WHEN fate.deaths >= %(poison)s THEN 'suspected poison job: its worker died in ' || fate.deaths || ' attempts'
            ELSE 'retry budget spent (' || j.attempts || ' of ' || j.max_attempts || '): worker died' END,
        error_class = CASE WHEN fate.ran THEN 'WorkerDied' ELSE j.error_class END,
        error_message = CASE WHEN fate.ran THEN %(reason)s ELSE j.error_message END,
        state_changed_at = clock.now, lease_owner = '', lease_expires_at = NULL
    FROM target, fate, clock
    WHERE j.id = target.id AND fate.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, fate.ran
),
attempt AS (
    UPDATE jobs_attempt AS a
    SET finished_at = clock.now,
        outcome = CASE WHEN changed.ran THEN %(outcome_died)s ELSE %(outcome_released)s END,
        error_class = CASE WHEN changed.ran THEN 'WorkerDied' ELSE '' END,
        error_message = CASE WHEN changed.ran THEN %(reason)s
                             ELSE 'its worker died while it waited its turn: ' || %(reason)s END
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version AND a.finished_at IS NULL
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: jobs_plan_if_retry_due
-- Failed jobs whose next attempt has come become %(target)s again, oldest first. A job keeps its due
-- time and so its place in line: its backoff was its earliest start, not a new place at the back of a
-- backlog (a job whose worker froze, was killed or failed would otherwise wait behind every job
-- submitted while it backed off).
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT j.id, j.state FROM jobs_job AS j, clock
    WHERE j.state = ANY(%(sources)s) AND j.next_attempt_at <= clock.now
    ORDER BY j.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now, next_attempt_at = NULL
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: job_reorder_if_waiting
-- An operator moves a job waiting in line (%(waiting)s): its lane (%(priority)s) and its due time
-- (%(due_at)s), either left as it is when NULL. No state changes, so no transition: the console's
-- audit entry records who moved it and why. Returns the job's lane and due time, or no row when it
-- is not waiting (it started, ended, or waits for its retry).
UPDATE jobs_job
SET priority = coalesce(%(priority)s, priority), due_at = coalesce(%(due_at)s, due_at)
WHERE id = %(job_id)s AND state = %(waiting)s
RETURNING priority, due_at


-- name: jobs_queue_for_review_if_allowed
-- Jobs in %(sources)s become review cases (%(target)s), oldest first: every unclear job (the
-- review-queue sweep), or the one job %(job_id)s (a recheck plan that reached its deadline, an
-- operator's "send to review").
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT j.id, j.state FROM jobs_job AS j, clock
    WHERE j.state = ANY(%(sources)s) AND (%(job_id)s::uuid IS NULL OR j.id = %(job_id)s::uuid)
    ORDER BY j.state_changed_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: jobs_retry_now_many_if_allowed
-- A bulk "retry now" (the set-based form of ``Job.retry_now``): the jobs of %(ids)s in a state the
-- transition allows become %(target)s, due now, with a fresh budget; locked ones are left alone.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
-- include: named_jobs_locked
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now, attempts = 0, due_at = clock.now,
        next_attempt_at = NULL, finished_at = NULL, completion_reason = ''
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: jobs_cancel_many_if_allowed
-- A bulk cancel (the set-based form of ``Job.cancel``): the jobs of %(ids)s in a state the
-- transition allows become %(target)s; a leased one's lease and attempt (%(outcome)s) end with it.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
-- include: named_jobs_locked
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now, completion_reason = %(reason)s,
        finished_at = clock.now, next_attempt_at = NULL, lease_owner = '', lease_expires_at = NULL
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
attempt AS (
    UPDATE jobs_attempt AS a SET finished_at = clock.now, outcome = %(outcome)s, error_message = %(reason)s
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version AND a.finished_at IS NULL
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: jobs_confirm_many_if_allowed
-- A bulk "confirm the outcome" (the set-based form of ``Job.confirm``): the jobs of %(ids)s in a
-- state the transition allows become %(target)s, finished now, with %(reason)s as their reason.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
-- include: named_jobs_locked
changed AS (
    UPDATE jobs_job AS j
    SET state = %(target)s, state_changed_at = clock.now, completion_reason = %(reason)s, finished_at = clock.now
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed


-- name: review_case_take_unless_held
-- Hold the oldest open case (%(state)s) of the normal or the escalated queue (or the case
-- %(job_id)s) that nobody else holds, or that %(me)s already holds, and that %(me)s did not
-- escalate, for %(seconds)s seconds, in one
-- statement: SKIP LOCKED keeps two reviewers from ever taking the same case at the same moment.
-- Returns the case's job id, or no row when none is free.
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
candidate AS (
    SELECT j.id FROM jobs_job AS j
    LEFT JOIN jobs_reviewlease AS l ON l.job_id = j.id
    CROSS JOIN clock
    WHERE j.state = %(state)s AND (l.job_id IS NULL OR l.expires_at <= clock.now OR l.reviewer = %(me)s)
      AND (%(job_id)s::uuid IS NULL OR j.id = %(job_id)s::uuid)
      AND %(escalated)s = EXISTS (SELECT 1 FROM jobs_reviewescalation AS e WHERE e.job_id = j.id)
      -- nobody takes a case they escalated themselves: another senior reviewer decides it
      AND NOT EXISTS (SELECT 1 FROM jobs_reviewescalation AS e WHERE e.job_id = j.id AND e.escalated_by = %(me)s)
    ORDER BY (l.reviewer IS NOT DISTINCT FROM %(me)s) DESC, j.state_changed_at, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
)
INSERT INTO jobs_reviewlease AS l (job_id, reviewer, taken_at, expires_at)
SELECT candidate.id, %(me)s, clock.now, clock.now + %(seconds)s * interval '1 second' FROM candidate, clock
ON CONFLICT (job_id) DO UPDATE SET reviewer = EXCLUDED.reviewer, taken_at = EXCLUDED.taken_at,
                                   expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= EXCLUDED.taken_at OR l.reviewer = EXCLUDED.reviewer
RETURNING job_id


-- name: effect_insert_unless_key_exists
-- Record an at-most-once effect under its key (the caller holds the job's lease, checked by
-- job_lock_if_lease_held in the same transaction). Returns its id, or no row when the key was
-- applied before. %(relaxed)s: the transaction commits without waiting for the disk (an attempt's
-- effect, whose attempt ends with a durable commit that flushes it too: see jobs/effects.py).
WITH relaxed AS (SELECT CASE WHEN %(relaxed)s THEN set_config('synchronous_commit', 'off', true) END)
INSERT INTO jobs_effect (key, kind, job_id, lease_version, applied_at, detail)
SELECT %(key)s, %(kind)s, %(job_id)s, %(lease_version)s, leitstand_now(), %(detail)s FROM relaxed
ON CONFLICT (key) DO NOTHING
RETURNING id


-- name: effect_result_get
-- The recorded result of an effect applied before.
SELECT result FROM jobs_effect WHERE key = %(key)s


-- name: effect_result_set
-- Record what an effect returned, in the transaction that applied it.
UPDATE jobs_effect SET result = %(result)s WHERE key = %(key)s


-- name: attempts_unchecked_lock_skip_locked
-- Up to %(limit)s ended attempts whose step path was not judged yet, oldest first, locked for the
-- path check (another control process skips them), with their run time.
SELECT a.id, a.job_id, a.lease_version, a.outcome, a.job_type,
       EXTRACT(EPOCH FROM (a.finished_at - a.started_at)) * 1000 AS duration_ms
FROM jobs_attempt a
WHERE NOT a.path_checked AND a.finished_at IS NOT NULL
ORDER BY a.id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED


-- name: step_events_of_attempts
-- The step events of the attempts in %(attempts)s (a JSON list of {job_id, lease_version}), in order.
SELECT s.job_id, s.lease_version, s.step, s.outcome, s.duration_ms
FROM jobs_stepevent s JOIN jsonb_to_recordset(%(attempts)s) AS k(job_id uuid, lease_version bigint)
  ON s.job_id = k.job_id AND s.lease_version = k.lease_version
ORDER BY s.id


-- name: attempts_path_record
-- Record the path check of each attempt in %(results)s (a JSON list): signature, conformance, what
-- diverged, run time and why it was slow.
UPDATE jobs_attempt a SET path_checked = true, path_signature = r.signature, path_conforms = r.conforms,
       path_divergence = r.divergence, path_divergence_kind = r.kind, duration_ms = r.duration_ms,
       slow = r.slow_reason <> '', slow_reason = r.slow_reason
FROM jsonb_to_recordset(%(results)s) AS r(id bigint, signature text, conforms boolean, divergence text, kind text,
                                          duration_ms double precision, slow_reason text)
WHERE a.id = r.id


-- name: attempt_previous_outcome_and_span
-- How the attempt before this one ended, and its span ('' when it recorded none): whether this claim
-- is a retry, and what a retry's span links to.
SELECT outcome, trace_span FROM jobs_attempt
WHERE job_id = %(job_id)s AND lease_version < %(lease_version)s
ORDER BY lease_version DESC LIMIT 1


-- name: attempt_run_time_p99_by_type
-- p99 run time and sample count per job type over the newest %(window)s checked attempts that ran
-- to an end of their own (outcomes %(outcomes)s).
SELECT job_type, percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms), count(*)
FROM (SELECT job_type, duration_ms FROM jobs_attempt WHERE path_checked AND duration_ms IS NOT NULL
      AND outcome = ANY(%(outcomes)s) ORDER BY id DESC LIMIT %(window)s) a
GROUP BY job_type


-- name: step_run_time_p99_by_type_and_step
-- p99 run time and sample count per (job type, step) over the newest %(window)s successful steps.
SELECT j.type, s.step, percentile_cont(0.99) WITHIN GROUP (ORDER BY s.duration_ms), count(*)
FROM (SELECT job_id, step, duration_ms FROM jobs_stepevent WHERE outcome = 'ok'
      ORDER BY id DESC LIMIT %(window)s) s
JOIN jobs_job j ON j.id = s.job_id GROUP BY j.type, s.step


-- name: webhook_events_drop_all
-- Without a webhook URL nothing is delivered: every event written so far is dropped in one statement.
DELETE FROM jobs_webhookevent WHERE id <= (SELECT max(id) FROM jobs_webhookevent)


-- name: batch_members_ended_per_bucket
-- Members of batch %(batch_id)s that ended (states %(ended)s) per %(step)s bucket since %(start)s.
SELECT date_bin(%(step)s, state_changed_at, %(start)s) AS bucket, count(*) FROM jobs_job
WHERE batch_id = %(batch_id)s AND state = ANY(%(ended)s) AND state_changed_at >= %(start)s
GROUP BY bucket ORDER BY bucket
