"""What flow keys cost the claim, and what they buy: fair shares between keys at equal priority.

Run: .venv/bin/python -m bench.flows [--jobs 20000] [--keys 100000] [--rounds 3]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

The baseline, measured in the same run on the same tables, is the claim before flow keys (issue 39):
one ordered scan of ``job_claim_idx`` (pool, priority, due_at, id), kept here as it was. Each
scenario claims batches of 100 (as a pool does: started at once) until the line is empty, and
counts claimed jobs per second of claim time; the claimed jobs are settled between claims outside
the measurement, so the leased set stays as small as a pool keeps it.

- **one key**: every job of the pool shares one key (what a pool without keys does).
- **one key, limited**: the same with a running limit that never binds: the claim lock and the
  count of the leases per key.
- **one key, rate-limited**: the same with a rate limit of 1,000,000 starts a second that never
  binds: the claim lock, the rooms, and the charge of the key's bucket after each claim.
- **100,000 keys**: each job its own key, so every claim looks at 100 lanes of 100,000.
- **fairness**: key A submits a flood, then key B 100 jobs at the same priority: how many jobs
  start before B's last one, and the shares of two flooding keys with weights 3 and 1.
- **the key view at 100,000 keys**: a page of 100 keys of the console's and the API's view
  (``jobs.flows.flow_keys``), the first and one from the middle, with every key's work waiting.
"""

import argparse
import os
import statistics
import time
import uuid
from collections import Counter

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from jobs import flows, insert, leases  # noqa: E402
from jobs.models import FlowKey, Job, State  # noqa: E402

WORKER = leases.WorkerIdentity(host="bench", pid=os.getpid(), pool="bench")
BATCH = 100

# The claim as it was before flow keys (jobs/queries.sql at 5b051a2), the baseline.
CLAIM_BEFORE = """
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
picked AS MATERIALIZED (
    SELECT j.id FROM jobs_job AS j
    WHERE j.state = %(source)s AND j.pool = %(pool)s AND j.due_at <= (SELECT now FROM clock)
      AND j.due_at >= '-infinity'::timestamptz
    ORDER BY j.priority, j.due_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE jobs_job AS j
    SET state = %(final)s, lease_version = j.lease_version + 1, attempts = j.attempts + 1,
        lease_owner = %(owner)s, lease_expires_at = clock.now + interval '60 seconds',
        heartbeat_at = clock.now, state_changed_at = clock.now, next_attempt_at = NULL
    FROM picked, clock
    WHERE j.id = picked.id
    RETURNING j.id, j.type, j.lease_version, j.attempts, j.max_attempts, j.payload, j.correlation_id,
              j.priority, j.schema_version, j.lease_expires_at, j.due_at, j.trace_parent, j.trace_state
),
attempt AS (
    INSERT INTO jobs_attempt (job_id, lease_version, job_type, lease_owner, worker_host, worker_pid, pool, claimed_at,
                              started_at, heartbeat_at, outcome, error_class, error_message, refused_writes,
                              last_refused_op)
    SELECT claimed.id, claimed.lease_version, claimed.type, %(owner)s, 'bench', 1, %(pool)s, clock.now,
           clock.now, clock.now, '', '', '', 0, ''
    FROM claimed, clock
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT claimed.id, %(source)s, %(target)s, clock.now, claimed.lease_version, 'claimed', %(owner)s
    FROM claimed, clock
    UNION ALL
    SELECT claimed.id, %(target)s, %(final)s, clock.now, claimed.lease_version, 'handler started', %(owner)s
    FROM claimed, clock
)
SELECT id, flow_key FROM jobs_job WHERE id IN (SELECT id FROM claimed)
"""


def submit(pool: str, keys: list[str], *, per_key: int = 1) -> None:
    """``per_key`` jobs of each key, in statements of 1,000 (the trigger makes their lanes)."""
    rows = [key for key in keys for _ in range(per_key)]
    for start in range(0, len(rows), 1000):
        insert.jobs_insert_many(
            [
                {
                    "type": pool,
                    "pool": pool,
                    "idempotency_key": uuid.uuid4().hex,
                    "payload": {"k": key},
                    "priority": 5,
                    "source": "",
                    "max_attempts": 5,
                    "schema_version": 1,
                    "request_hash": "",
                    "flow_key_declaration": "payload.k",
                }
                for key in rows[start : start + 1000]
            ],
            actor="bench",
            correlation_id="bench",
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_flowlane")


def settle(ids: list) -> None:
    """Out of the measurement: the claimed jobs leave the leased set, as a pool's completions do."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET state = 'done' WHERE id = ANY(%s)", [ids])


def claim_before(pool: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM_BEFORE,
            {
                "source": State.PLANNED,
                "target": State.RESERVED,
                "final": State.RUNNING,
                "pool": pool,
                "limit": BATCH,
                "owner": WORKER.lease_owner,
            },
        )
        return cursor.fetchall()


def claim_now(pool: str, flow_limit: int | None) -> list:
    return leases.claim(pool=pool, worker=WORKER, lease_seconds=60, limit=BATCH, start=True, flow_limit=flow_limit)


def drain(pool: str, *, before: bool, flow_limit: int | None = None) -> tuple[float, list]:
    """Claims of ``BATCH`` until the pool's line is empty: (jobs per second of claim time, the IDs in
    the order they were claimed)."""
    order, spent = [], 0.0
    while True:
        began = time.perf_counter()
        claimed = claim_before(pool) if before else claim_now(pool, flow_limit)
        spent += time.perf_counter() - began
        if not claimed:
            break
        ids = [row[0] for row in claimed] if before else [job.id for job in claimed]
        order += ids
        settle(ids)
    return len(order) / spent, order


def cost(jobs: int, keys: int, *, before: bool, flow_limit: int | None = None, rate: bool = False) -> float:
    pool = f"b{uuid.uuid4().hex[:10]}"
    names = [f"k{i}" for i in range(keys)]
    submit(pool, names, per_key=max(1, jobs // keys))
    if rate:  # a rate limit that never binds: the claim lock, the rooms and the bucket's charge
        FlowKey.objects.create(pool=pool, key=names[0], rate_starts=10**6, rate_seconds=1)
        leases.flow_settings_changed()
    rate, order = drain(pool, before=before, flow_limit=flow_limit)
    assert len(order) == max(1, jobs // keys) * keys, (len(order), jobs)
    return rate


def fairness(flood: int) -> dict:
    pool = f"f{uuid.uuid4().hex[:10]}"
    submit(pool, ["A"], per_key=flood)
    submit(pool, ["B"], per_key=100)
    _, order = drain(pool, before=False)
    keys = dict(Job.objects.filter(pool=pool).values_list("id", "flow_key"))
    last_b = max(i for i, job in enumerate(order) if keys[job] == "B")
    weighted = f"w{uuid.uuid4().hex[:10]}"
    submit(weighted, ["heavy", "light"], per_key=flood // 2)
    FlowKey.objects.create(pool=weighted, key="heavy", weight=3)
    leases.flow_settings_changed()
    taken = Counter()
    for _ in range(flood // 4 // BATCH):  # a quarter of the work, while both keys have plenty left
        claimed = claim_now(weighted, None)
        found = dict(Job.objects.filter(pk__in=[c.id for c in claimed]).values_list("id", "flow_key"))
        taken.update(found[c.id] for c in claimed)
        settle([c.id for c in claimed])
    return {"started_before_b_done": last_b + 1, "shares": taken}


def key_view(keys: int) -> dict:
    """Milliseconds for a page of 100 keys of a pool with ``keys`` keys waiting, median of 5."""
    pool = f"v{uuid.uuid4().hex[:10]}"
    submit(pool, [f"k{i:06d}" for i in range(keys)])
    timings = {}
    for name, after in (("first page", None), ("a page from the middle", f"k{keys // 2:06d}")):
        spent = []
        for _ in range(5):
            began = time.perf_counter()
            rows = flows.flow_keys(pool, limit=100, after=after)
            spent.append((time.perf_counter() - began) * 1000)
            assert len(rows) == 100
        timings[name] = statistics.median(spent)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    cost(2000, 1, before=True)  # warm-up: connections, plans, caches
    cost(2000, 1, before=False)
    n = args.jobs
    scenarios = {
        "the claim before flow keys, one pool (baseline)": lambda: cost(n, 1, before=True),
        "flow-key claim, one key": lambda: cost(n, 1, before=False),
        "flow-key claim, one key, running limit (not binding)": lambda: cost(n, 1, before=False, flow_limit=10**6),
        "flow-key claim, one key, rate limit (not binding)": lambda: cost(n, 1, before=False, rate=True),
        f"the claim before flow keys, {args.keys:,} jobs (baseline)": lambda: cost(args.keys, 1, before=True),
        f"flow-key claim, {args.keys:,} keys with a job each": lambda: cost(args.keys, args.keys, before=False),
    }
    # Rounds interleave the scenarios, so a slow spell of the machine hits all of them alike.
    results = {name: [] for name in scenarios}
    for _ in range(args.rounds):
        for name, run in scenarios.items():
            results[name].append(run())
    median = {name: statistics.median(rates) for name, rates in results.items()}
    print(f"claims of {BATCH}, started at once; jobs claimed per second of claim time (median of {args.rounds})")
    print(f"{'scenario':<62}{'per s':>9}{'ratio':>8}  rounds")
    baseline = None
    for name, rate in median.items():
        if name.endswith("(baseline)"):
            baseline = rate
        rounds = " / ".join(f"{r:.0f}" for r in results[name])
        print(f"{name:<62}{rate:>9.0f}{rate / baseline:>8.2f}  {rounds}")
    found = fairness(n)
    print(
        f"fairness: A floods {n:,}, then B submits 100 at the same priority: B's last job starts as job "
        f"{found['started_before_b_done']} (fair share 1:1 bound: 200)"
    )
    shares = found["shares"]
    print(
        f"weights 3:1, both flooding: heavy {shares['heavy']}, light {shares['light']} "
        f"(ratio {shares['heavy'] / max(shares['light'], 1):.2f})"
    )
    for name, ms in key_view(args.keys).items():
        print(f"key view, {args.keys:,} keys waiting, {name}: {ms:.1f} ms")


if __name__ == "__main__":
    main()
