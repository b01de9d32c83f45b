"""End-to-end throughput of a real pool: synthetic no-op jobs vs bare django-q2 no-op tasks.

Run: .venv/bin/python -m bench.throughput [--jobs 20000] [--tasks 2000] [--workers 2] [--pgbouncer]
[--wal-profile] (uses a throwaway embedded PostgreSQL unless DATABASE_URL is set). With
``--pgbouncer`` Leitstand's side runs a second time in the same run through Debian's PgBouncer in
transaction mode (pool size 4, ``LEITSTAND_PGBOUNCER=transaction``), beside the direct connection.
``--wal-profile`` adds where the no-op jobs' WAL went, by record kind and by relation (``pg_waldump``).
``--tracing`` runs Leitstand's side again with spans recorded and exported over OTLP/HTTP to a local
receiver (``devtools/otlp.py``; ``OTEL_*`` as an operator sets them), and reports the spans it got.

The baseline is stock django-q2 (`manage.py qcluster`, its own Sentinel) running no-op tasks; the
same tasks then run through `runpool` (Leitstand's supervisor with per-worker hand-offs). Every side
runs on the same cluster settings (ORM broker, save_limit=-1, the same worker count) in the same
run. Work is queued first with the pool stopped; then the pool starts and the rate is measured
between the first and the last completion seen by polling (50 ms), so start-up time is not counted
on any side. Leitstand's side is the whole machinery: wake-ups, the control process, a claim that
starts the batch, handlers with contexts, one fenced batch completion with attempt and transition
rows for every job.
"""

import argparse
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def noop():
    """The bare django-q2 task."""


def pool_env(workers: int, **extra: str) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "LEITSTAND_CRAWL_WORKERS": str(workers),
        "LEITSTAND_RUN_DIR": str(ROOT / "var" / "bench-run"),
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def start(name: str, workers: int, *, stock: bool = False, **extra: str) -> subprocess.Popen:
    """``runpool`` (Leitstand's supervisor), or with ``stock`` django-q2's own ``qcluster`` (its Sentinel)."""
    command = ["qcluster"] if stock else ["runpool", name]
    env = {**pool_env(workers, **extra), "Q_CLUSTER_NAME": name} if stock else pool_env(workers, **extra)
    return subprocess.Popen(
        [sys.executable, "manage.py", *command], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=60)


def count(sql: str, params=()) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def measure(remaining, total: int, timeout: float = 600) -> float:
    """Rate between the first and the last completion, polling ``remaining()`` every 50 ms."""
    deadline = time.monotonic() + timeout
    first = last = None
    while time.monotonic() < deadline:
        left = remaining()
        now = time.monotonic()
        if left < total and first is None:
            first, first_done = now, total - left
        if left == 0:
            last = now
            break
        time.sleep(0.05)
    if last is None:
        raise RuntimeError(f"not done within {timeout} s")
    return (total - first_done) / max(last - first, 1e-6)


def bare_django_q(tasks: int, workers: int, *, stock: bool = False) -> float:
    from django_q.tasks import async_task

    for _ in range(tasks):
        async_task("bench.throughput.noop", cluster="crawl")
    pool = start("crawl", workers, stock=stock)
    try:
        return measure(lambda: count("SELECT count(*) FROM django_q_ormq WHERE key = 'crawl'"), tasks)
    finally:
        stop(pool)


def plan_synthetic(*, pool: str, tag: str, payload: dict, max_attempts: int = 5, job_id=None) -> uuid.UUID:
    """One planned synthetic job straight through the engine (no API, no validation): the benches' work.
    Its ID is one the engine gives; its idempotency key random, as a producer's keys are."""
    from jobs import leases
    from jobs.models import job_id_new

    job_id = job_id or job_id_new()
    leases.insert_planned(
        id=job_id,
        type="synthetic",
        pool=pool,
        idempotency_key=f"{tag}-{uuid.uuid4()}",
        correlation_id=tag,
        parent_id=None,
        schema_version=1,
        priority=5,
        source="",
        payload=payload,
        max_attempts=max_attempts,
        due_at=None,
        actor="bench",
    )
    return job_id


COSTS = """
SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, pg_current_wal_lsn()
FROM pg_stat_database WHERE datname = current_database()
"""


def database_costs() -> tuple:
    """The database's commits, rows inserted/updated/deleted and WAL position so far (the server's
    statistics are flushed first, so the last second's work counts)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(1.1), pg_stat_clear_snapshot()")  # stats reach shared memory within 1 s
        cursor.execute(COSTS)
        return cursor.fetchone()


def per_job(before: tuple, after: tuple, jobs: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(%s, %s)", [after[4], before[4]])
        wal = cursor.fetchone()[0]
    commits, inserted, updated, deleted = (after[n] - before[n] for n in range(4))
    return (
        f"per job: {commits / jobs:.2f} commits, {inserted / jobs:.1f} rows inserted, {updated / jobs:.1f} updated, "
        f"{deleted / jobs:.1f} deleted, {wal / jobs:,.0f} bytes of WAL (the whole machinery, sweeps included)"
    )


WAL_RECORD = re.compile(
    r"rmgr: (\S+)\s+len \(rec/tot\):\s+\d+/\s*(\d+).*?desc: (\S+)(?:.*?blkref #0: rel \d+/\d+/(\d+))?"
)


def wal_profile(start: str, end: str, jobs: int, top: int = 24) -> str:
    """What the WAL between two positions was written for, in bytes per job: by record kind and by
    relation (the one its first block belongs to; full-page images included), read by ``pg_waldump``
    from the throwaway embedded server's WAL."""
    from config import test_settings
    from devtools.embedded_db import client_program

    server = getattr(test_settings, "_server", None)
    if server is None:
        raise SystemExit("--wal-profile reads the throwaway embedded server's WAL: run it without DATABASE_URL")
    dump = subprocess.run(
        [client_program("pg_waldump"), "-p", str(server.pgdata / "pg_wal"), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    by_kind, by_node = Counter(), Counter()
    for match in WAL_RECORD.finditer(dump):
        rmgr, size, desc, node = match.groups()
        by_kind[f"{rmgr} {desc}"] += int(size)
        by_node[node or "(no relation)"] += int(size)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relfilenode::text, relname FROM pg_class WHERE relfilenode = ANY(%s::oid[])",
            [[node for node in by_node if node.isdigit()]],
        )
        names = dict(cursor.fetchall())
    lines = [f"WAL per job by record ({sum(by_kind.values()) / jobs:,.0f} bytes read by pg_waldump):"]
    lines += [f"  {kind:<40} {size / jobs:>8,.0f}" for kind, size in by_kind.most_common(top)]
    lines.append("WAL per job by relation:")
    lines += [f"  {names.get(node, node):<40} {size / jobs:>8,.0f}" for node, size in by_node.most_common(top)]
    return "\n".join(lines)


def tracing_env(receiver) -> dict[str, str]:
    """The environment that turns tracing on, exporting to ``receiver`` (an OtlpReceiver)."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "leitstand-bench"}


def spans_settled(receiver, quiet_seconds: float = 2.0, timeout: float = 60.0) -> int:
    """The spans ``receiver`` holds once no more arrive for ``quiet_seconds`` (the last batches)."""
    deadline, seen, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        now = len(receiver.received())
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_seconds:
            break
        time.sleep(0.2)
    return seen


def leitstand_jobs(jobs: int, workers: int, **extra: str) -> float:
    with transaction.atomic():
        for _ in range(jobs):
            plan_synthetic(pool="crawl", tag="bench", payload={})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    control = start("control", workers, **extra)
    pool = start("crawl", workers, **extra)
    try:
        return measure(
            lambda: count("SELECT count(*) FROM jobs_job WHERE pool = 'crawl' AND state <> 'result_stored'"), jobs
        )
    finally:
        stop(pool)
        stop(control)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pgbouncer", action="store_true", help="also through PgBouncer in transaction mode")
    parser.add_argument("--wal-profile", action="store_true", help="where the no-op jobs' WAL went (pg_waldump)")
    parser.add_argument("--tracing", action="store_true", help="also with spans exported to a local OTLP receiver")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    bare = bare_django_q(args.tasks, args.workers, stock=True)
    supervised = bare_django_q(args.tasks, args.workers)
    costs_before = database_costs()
    ours = leitstand_jobs(args.jobs, args.workers)
    costs_after = database_costs()
    costs = per_job(costs_before, costs_after, args.jobs)
    if args.tracing:
        from devtools.otlp import OtlpReceiver

        receiver = OtlpReceiver()
        traced = leitstand_jobs(args.jobs, args.workers, **tracing_env(receiver))
        exported = spans_settled(receiver)
        receiver.close()
    if args.pgbouncer:
        from devtools import pgbouncer

        with pgbouncer.local(os.environ["DATABASE_URL"], pool_size=4) as bouncer:
            through = bouncer.through(os.environ["DATABASE_URL"])
            pooled = leitstand_jobs(args.jobs, args.workers, DATABASE_URL=through, LEITSTAND_PGBOUNCER="transaction")
    print(f"{args.workers} workers, ORM broker on PostgreSQL, save_limit=-1")
    print(f"{'scenario':<58} {'per s':>8} {'ratio':>7}")
    print(f"{f'bare django-q2 no-op tasks ({args.tasks}) (baseline)':<58} {bare:>8.0f} {1:>7.2f}")
    print(
        f"{f'the same tasks through the pool supervisor ({args.tasks})':<58} {supervised:>8.0f} "
        f"{supervised / bare:>7.2f}"
    )
    print(f"{f'leitstand synthetic no-op jobs, end to end ({args.jobs})':<58} {ours:>8.0f} {ours / bare:>7.2f}")
    print(f"  {costs}")
    if args.tracing:
        label = f"the same with tracing on, exported over OTLP ({args.jobs})"
        print(f"{label:<58} {traced:>8.0f} {traced / bare:>7.2f}  ({traced / ours:.2f} of tracing off)")
        print(f"  {exported / args.jobs:.2f} spans received per job ({exported} in all)")
    if args.wal_profile:
        print(wal_profile(costs_before[4], costs_after[4], args.jobs))
    if args.pgbouncer:
        label = f"the same through PgBouncer, transaction mode ({args.jobs})"
        print(f"{label:<58} {pooled:>8.0f} {pooled / bare:>7.2f}  ({pooled / ours:.2f} of direct)")


if __name__ == "__main__":
    main()
