"""History at scale, part one: what a day of history costs and how fast it leaves.

Run: .venv/bin/python -m bench.soak [--jobs 10000000] [--days 30]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set; it runs as the owner role).

Builds, server-side with ``generate_series``, the history of ``--jobs`` ended jobs spread evenly over
``--days`` days — each job with an attempt, four transitions and a step event, as a no-op job writes
them — into the daily partitions of the transition log and the step events. It reports rows and bytes
per million jobs, then removes one day's history twice, on two days of the same size:

- baseline: ``DELETE FROM … WHERE part_day = <day>`` on both tables (what a purge without partitions
  does, the append-only trigger let through as the owner);
- Leitstand: the jobs of the next day are purged as archived, then ``leitstand_partitions_drop``
  drops that day's partitions whole (what the retention sweep does).

The pools running over the history (throughput, claim latency and console pages at the start and
the end of a long run) are not measured here yet.
"""

import argparse
import os
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

HISTORY = ("jobs_job", "jobs_attempt", "jobs_transition", "jobs_stepevent")
QUIET = ("jobs_transition_webhook_outbox", "jobs_transition_batch_counters")


def sql(statement: str, parameters=()) -> list:
    with connection.cursor() as cursor:
        cursor.execute(statement, parameters if isinstance(parameters, dict) else list(parameters))
        return cursor.fetchall() if cursor.description else []


def partitions_for_past_days(days: int) -> None:
    """The bench database is fresh: its legacy partitions are empty; daily ones replace them."""
    today = sql("SELECT (leitstand_now() AT TIME ZONE 'UTC')::date")[0][0]
    for table in ("jobs_transition", "jobs_stepevent"):
        sql(f"DROP TABLE IF EXISTS {table}_legacy")
        for back in range(1, days + 1):
            day = today.fromordinal(today.toordinal() - back)
            sql(
                f"CREATE TABLE IF NOT EXISTS {table}_p{day:%Y%m%d} PARTITION OF {table} "
                "FOR VALUES FROM (%s::date) TO (%s::date + 1)",
                [day, day],
            )


def build(jobs: int, days: int) -> float:
    started = time.perf_counter()
    per_day = jobs // days
    for trigger in QUIET:  # the bench loads history: no webhook outbox, no batch counters
        sql(f"ALTER TABLE jobs_transition DISABLE TRIGGER {trigger}")
    for back in range(1, days + 1):
        sql(
            """
            WITH made AS (
                INSERT INTO jobs_job (id, type, pool, idempotency_key, correlation_id, state, created_at,
                                      state_changed_at, finished_at, attempts, lease_version)
                SELECT gen_random_uuid(), 'synthetic', 'crawl', 'soak-' || %(back)s || '-' || n, 'soak-' || n, 'done',
                       d - interval '1 minute', d, d, 1, 1
                FROM generate_series(1, %(per_day)s) AS n,
                     LATERAL (SELECT (current_date - %(back)s) + (n * interval '86399 seconds' / %(per_day)s) AS d) AS t
                RETURNING id, finished_at
            ),
            attempts AS (
                INSERT INTO jobs_attempt (job_id, lease_version, lease_owner, worker_host, worker_pid, pool, claimed_at,
                                          started_at, finished_at, outcome, error_class, error_message,
                                          refused_writes, last_refused_op)
                SELECT id, 1, 'soak:1/crawl', 'soak', 1, 'crawl', finished_at, finished_at, finished_at, 'completed',
                       '', '', 0, ''
                FROM made
            ),
            steps AS (
                INSERT INTO jobs_stepevent (job_id, lease_version, correlation_id, step, outcome, started_at,
                                            duration_ms, data, part_day)
                SELECT id, 1, 'soak', 'work', 'ok', finished_at, 1.0, '{}', finished_at::date FROM made
            )
            INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor, part_day)
            SELECT id, s.from_state, s.to_state, finished_at, 1, 'soak', 'soak', finished_at::date
            FROM made, (VALUES ('', 'planned'), ('planned', 'running'), ('running', 'result_stored'),
                                ('result_stored', 'done')) AS s(from_state, to_state)
            """,
            {"back": back, "per_day": per_day},
        )
    for trigger in QUIET:
        sql(f"ALTER TABLE jobs_transition ENABLE TRIGGER {trigger}")
    for table in HISTORY:
        sql(f"ANALYZE {table}")
    return time.perf_counter() - started


def sizes() -> dict:
    return {table: sql("SELECT pg_total_relation_size(%s)", [table])[0][0] for table in HISTORY}


def partition_bytes(table: str) -> int:
    return sql(
        "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = %s::regclass",
        [table],
    )[0][0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    partitions_for_past_days(args.days)
    print(f"building the history of {args.jobs:,} jobs over {args.days} days …", flush=True)
    took = build(args.jobs, args.days)
    total = sizes()
    total["jobs_transition"] = partition_bytes("jobs_transition")
    total["jobs_stepevent"] = partition_bytes("jobs_stepevent")
    rows = {table: sql(f"SELECT count(*) FROM {table}")[0][0] for table in HISTORY}
    print(f"built in {took:.0f} s ({args.jobs / took:,.0f} jobs/s)")
    print(f"\n{'table':<18} {'rows':>14} {'bytes':>16} {'per million jobs':>18}")
    for table in HISTORY:
        print(
            f"{table:<18} {rows[table]:>14,} {total[table]:>16,} {total[table] / args.jobs * 1e6 / 2**20:>14,.0f} MiB"
        )
    print(
        f"{'all':<18} {sum(rows.values()):>14,} {sum(total.values()):>16,} "
        f"{sum(total.values()) / args.jobs * 1e6 / 2**20:>14,.0f} MiB"
    )

    oldest = sql("SELECT min(part_day) FROM jobs_transition")[0][0]
    dropped_day, deleted_day = oldest, oldest.fromordinal(oldest.toordinal() + 1)
    day_rows = sql("SELECT count(*) FROM jobs_transition WHERE part_day = %s", [deleted_day])[0][0]

    # Baseline: a day's history deleted row by row (as the owner, through the append-only trigger).
    started = time.perf_counter()
    sql("SELECT set_config('leitstand.allow_purge', 'on', false)")
    sql("DELETE FROM jobs_transition WHERE part_day = %s", [deleted_day])
    sql("DELETE FROM jobs_stepevent WHERE part_day = %s", [deleted_day])
    sql("SELECT set_config('leitstand.allow_purge', 'off', false)")
    baseline = time.perf_counter() - started

    # Leitstand: the day's jobs left as archived (not timed: both ways delete the jobs themselves),
    # then its partitions are dropped whole.
    sql(
        "INSERT INTO dashboard_archivefile (path, day, job_type, state, jobs, purged, bytes, sha256, error, created_at) "
        "VALUES ('jobs/soak.jsonl.gz', %s, 'synthetic', 'purged', 0, 0, 0, '', '', now())",
        [dropped_day],
    )
    file_id = sql("SELECT max(id) FROM dashboard_archivefile")[0][0]
    sql(
        "INSERT INTO dashboard_archivedjob (job_id, file_id, line, type, state, correlation_id, finished_at) "
        "SELECT id, %s, 0, type, state, correlation_id, finished_at FROM jobs_job WHERE finished_at::date = %s",
        [file_id, dropped_day],
    )
    sql("DELETE FROM jobs_attempt WHERE job_id IN (SELECT job_id FROM dashboard_archivedjob)")
    sql("DELETE FROM jobs_job WHERE id IN (SELECT job_id FROM dashboard_archivedjob)")
    started = time.perf_counter()
    dropped = sql("SELECT leitstand_partitions_drop(%s::date + 1)", [dropped_day])[0][0]
    partitioned = time.perf_counter() - started
    assert dropped == 2, f"{dropped} partitions dropped"
    print(f"\none day's history: {day_rows:,} transitions and {day_rows // 4:,} step events")
    print(f"{'DELETE … WHERE part_day (baseline)':<40} {baseline * 1000:>10,.0f} ms")
    print(f"{'leitstand_partitions_drop':<40} {partitioned * 1000:>10,.0f} ms   {baseline / partitioned:,.0f}× faster")


if __name__ == "__main__":
    main()
