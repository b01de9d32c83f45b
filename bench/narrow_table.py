"""What a narrow hot job table would save: the job table's writes in today's layout and in a split one.

Run: .venv/bin/python -m bench.narrow_table [--jobs 20000] [--batch 100] [--rounds 2]
(a throwaway embedded PostgreSQL unless DATABASE_URL is set).

Issue 37 asks whether the hot, mutable part of a job (state, lease, due time, attempt counters)
should live in a narrow table with the claim's and the reaper's indexes, apart from the wide record
(payload, result, business fields, the console's indexes) written at creation and at the states
people look at. This measures the job table's own share of that decision before building it: two
copies of `jobs_job` made by `CREATE TABLE … (LIKE jobs_job INCLUDING ALL)` — its columns, unique key
and every index, partial conditions included — each driven through a no-op job's life as the engine
writes it (`jobs/queries.sql`): inserted planned in batches of 1,000, claimed and started in one
update of `--batch` jobs picked through the claim's index with `FOR UPDATE SKIP LOCKED`, completed
and settled in one update by key.

- **today**: the copy as it is; claim and completion update the one row.
- **split**: the copy without the four indexes only the claim, the queue's age, the retry promotion
  and the reaper read, plus a narrow table `(id, type, pool, priority, due_at, state, lease_version,
  lease_owner, lease_expires_at, heartbeat_at, attempts)` that carries them; a job's creation writes
  both, the claim only the narrow row, the completion the wide row (its final state and result) and
  deletes the narrow one.

Per job: WAL bytes and row versions written, and the time of the three statements, each layout in
turn, rounds interleaved. The transition log, attempts and step events are the same in both layouts
and left out (`bench.throughput --wal-profile` shows them).
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from jobs.models import job_id_new  # noqa: E402

# The indexes of jobs_job that only the engine's queue reads: in the split layout they are the narrow
# table's.
QUEUE_INDEXES = ("job_claim_idx", "job_queue_age_idx", "job_retry_due_idx", "job_leased_idx")

CLAIM_PICK = """
SELECT id FROM {hot} WHERE state = 'planned' AND pool = 'bench' AND due_at <= now()
ORDER BY priority, due_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
"""
HOT_CLAIM = """
WITH picked AS MATERIALIZED ({pick})
UPDATE {hot} AS j SET state = 'running', lease_version = j.lease_version + 1, attempts = j.attempts + 1,
    lease_owner = 'bench:1', lease_expires_at = now() + interval '60 seconds', heartbeat_at = now(){extra}
FROM picked WHERE j.id = picked.id RETURNING j.id
"""
TODAY_CLAIM_EXTRA = ", state_changed_at = now(), next_attempt_at = NULL, processing_version = 'bench@1'"
COMPLETE = """
UPDATE {table} AS j SET state = 'done', state_changed_at = now(), result_ref = 'ref', result_checksum = 'sum',
    lease_owner = '', lease_expires_at = NULL, finished_at = now(), completion_reason = 'settled'{extra}
WHERE j.id = ANY(%(ids)s::uuid[])
"""
INSERT = """
INSERT INTO {table} (id, type, pool, key_namespace, idempotency_key, request_hash, correlation_id, schema_version,
                     processing_version, priority, source, subject, payload, created_at, due_at, state,
                     state_changed_at, lease_owner, lease_version, attempts, max_attempts, result_ref, result_checksum,
                     error_class, error_message, completion_reason)
SELECT id, 'synthetic', 'bench', '', 'bench-' || id, '', 'bench', 1, '', 5, '', '', '{{"pool": "bench"}}', now(), now(),
       'planned', now(), '', 0, 0, 5, '', '', '', '', ''
FROM unnest(%(ids)s::uuid[]) AS i(id)
"""
HOT_INSERT = """
INSERT INTO bench_hot (id, type, pool, priority, due_at, state, lease_version, lease_owner, attempts)
SELECT id, 'synthetic', 'bench', 5, now(), 'planned', 0, '', 0 FROM unnest(%(ids)s::uuid[]) AS i(id)
"""


def execute(sql: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else None


def layouts_create() -> None:
    for table in ("bench_today", "bench_record", "bench_hot"):
        execute(f"DROP TABLE IF EXISTS {table}")
    for table in ("bench_today", "bench_record"):
        execute(f"CREATE TABLE {table} (LIKE jobs_job INCLUDING ALL) WITH (fillfactor = 90)")
    # LIKE names each copy after its columns: find the queue's indexes by their definitions.
    copies = {
        definition.split(" USING ", 1)[1]: name
        for name, definition in execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'bench_record'")
    }
    for index in QUEUE_INDEXES:
        execute(
            f"DROP INDEX {copies[execute('SELECT pg_get_indexdef(%s::regclass)', [index])[0][0].split(' USING ', 1)[1]]}"
        )
    execute("""
        CREATE TABLE bench_hot (
            id uuid PRIMARY KEY, type varchar(64) NOT NULL, pool varchar(64) NOT NULL, priority smallint NOT NULL,
            due_at timestamptz NOT NULL, state varchar(20) NOT NULL, lease_version integer NOT NULL,
            lease_owner varchar(255) NOT NULL, lease_expires_at timestamptz, heartbeat_at timestamptz,
            attempts smallint NOT NULL
        ) WITH (fillfactor = 90)""")
    execute("CREATE INDEX ON bench_hot (pool, priority, due_at, id) WHERE state = 'planned'")
    execute("CREATE INDEX ON bench_hot (type, due_at) WHERE state = 'planned'")
    execute("CREATE INDEX ON bench_hot (id) WHERE state IN ('reserved', 'running')")


def wal() -> int:
    return int(execute("SELECT pg_current_wal_lsn() - '0/0'")[0][0])


def versions(tables) -> int:
    """Row versions written to ``tables`` so far (inserted + updated + deleted, HOT or not)."""
    execute("SELECT pg_stat_force_next_flush()")
    return int(
        execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s)",
            [list(tables)],
        )[0][0]
    )


def run(layout: str, jobs: int, batch: int) -> dict:
    """One layout through ``jobs`` no-op lives; the figures per job."""
    execute("TRUNCATE bench_today, bench_record, bench_hot")
    tables = ("bench_today",) if layout == "today" else ("bench_record", "bench_hot")
    start_wal, start_versions = wal(), versions(tables)
    began = time.perf_counter()
    for offset in range(0, jobs, 1000):
        ids = [str(job_id_new()) for _ in range(min(1000, jobs - offset))]
        if layout == "today":
            execute(INSERT.format(table="bench_today"), {"ids": ids})
        else:
            execute(INSERT.format(table="bench_record"), {"ids": ids})
            execute(HOT_INSERT, {"ids": ids})
    inserted = time.perf_counter()
    hot = "bench_today" if layout == "today" else "bench_hot"
    claim = HOT_CLAIM.format(
        hot=hot,
        pick=CLAIM_PICK.format(hot=hot),
        extra=TODAY_CLAIM_EXTRA if layout == "today" else "",
    )
    claim_time = complete_time = 0.0
    while True:
        t0 = time.perf_counter()
        ids = [str(row[0]) for row in execute(claim, {"limit": batch})]
        t1 = time.perf_counter()
        if not ids:
            break
        if layout == "today":
            execute(COMPLETE.format(table="bench_today", extra=""), {"ids": ids})
        else:
            execute(COMPLETE.format(table="bench_record", extra=""), {"ids": ids})
            execute("DELETE FROM bench_hot WHERE id = ANY(%(ids)s::uuid[])", {"ids": ids})
        claim_time += t1 - t0
        complete_time += time.perf_counter() - t1
    return {
        "wal": (wal() - start_wal) / jobs,
        "versions": (versions(tables) - start_versions) / jobs,
        "insert_ms": (inserted - began) * 1000 / jobs,
        "claim_ms": claim_time * 1000 / jobs,
        "complete_ms": complete_time * 1000 / jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    layouts_create()
    results: dict[str, list[dict]] = {"today": [], "split": []}
    try:
        for _ in range(args.rounds):
            for layout in results:
                results[layout].append(run(layout, args.jobs, args.batch))
    finally:
        execute("DROP TABLE IF EXISTS bench_today, bench_record, bench_hot")
    print(f"{args.jobs} no-op lives per layout, claims of {args.batch}, {args.rounds} rounds interleaved (median):")
    print(f"{'per job':<26}{'today':>12}{'split':>12}{'split/today':>13}")
    for key, label in [
        ("wal", "WAL bytes"),
        ("versions", "row versions"),
        ("insert_ms", "insert ms"),
        ("claim_ms", "claim ms"),
        ("complete_ms", "completion ms"),
    ]:
        today = statistics.median(r[key] for r in results["today"])
        split = statistics.median(r[key] for r in results["split"])
        print(f"{label:<26}{today:>12.3f}{split:>12.3f}{split / today:>13.2f}")


if __name__ == "__main__":
    main()
