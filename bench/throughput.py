"""End-to-end throughput of a real pool: synthetic no-op jobs vs bare django-q2 no-op tasks.

Run: .venv/bin/python -m bench.throughput [--jobs 20000] [--tasks 2000] [--workers 2]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

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
import subprocess
import sys
import time
import uuid
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def noop():
    """The bare django-q2 task."""


def pool_env(workers: int) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "LEITSTAND_CRAWL_WORKERS": str(workers),
        "LEITSTAND_RUN_DIR": str(ROOT / "var" / "bench-run"),
        "PYTHONPATH": str(ROOT),
    }


def start(name: str, workers: int, *, stock: bool = False) -> subprocess.Popen:
    """``runpool`` (Leitstand's supervisor), or with ``stock`` django-q2's own ``qcluster`` (its Sentinel)."""
    command = ["qcluster"] if stock else ["runpool", name]
    env = {**pool_env(workers), "Q_CLUSTER_NAME": name} if stock else pool_env(workers)
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
    """One planned synthetic job straight through the engine (no API, no validation): the benches' work."""
    from jobs import leases

    job_id = job_id or uuid.uuid4()
    leases.insert_planned(
        id=job_id,
        type="synthetic",
        pool=pool,
        idempotency_key=f"{tag}-{job_id}",
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


def leitstand_jobs(jobs: int, workers: int) -> float:
    with transaction.atomic():
        for _ in range(jobs):
            plan_synthetic(pool="crawl", tag="bench", payload={})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    control = start("control", workers)
    pool = start("crawl", workers)
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
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    bare = bare_django_q(args.tasks, args.workers, stock=True)
    supervised = bare_django_q(args.tasks, args.workers)
    ours = leitstand_jobs(args.jobs, args.workers)
    print(f"{args.workers} workers, ORM broker on PostgreSQL, save_limit=-1")
    print(f"{'scenario':<58} {'per s':>8} {'ratio':>7}")
    print(f"{f'bare django-q2 no-op tasks ({args.tasks}) (baseline)':<58} {bare:>8.0f} {1:>7.2f}")
    print(
        f"{f'the same tasks through the pool supervisor ({args.tasks})':<58} {supervised:>8.0f} "
        f"{supervised / bare:>7.2f}"
    )
    print(f"{f'leitstand synthetic no-op jobs, end to end ({args.jobs})':<58} {ours:>8.0f} {ours / bare:>7.2f}")


if __name__ == "__main__":
    main()
