"""Start latency: from a submission's commit to its handler's start, on an idle pool.

Run: .venv/bin/python -m bench.latency [--jobs 50] [--workers 2] [--gap 0.3]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

A real control process and a real crawl pool (``runpool``, 2 workers) run with nothing to do; this
process submits one synthetic no-op job at a time (``job_submit`` in its own transaction, as
``manage.py enqueue`` and ``POST /api/v1/jobs`` do), ``--gap`` seconds apart, so each one finds the
pool idle. The latency is database time: the job's ``created_at`` (its insert, in the submitting
transaction) to its attempt's ``started_at`` (the claim that started it) — what a user waits before
work begins. Measured for each wake-up path in the same run: the ORM broker at its default poll
(``LEITSTAND_QUEUE_POLL_SECONDS`` 0.1), and wake-ups through Redis (a throwaway ``redis-server``).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid

from django.db import connection, transaction

from bench.throughput import ROOT, pool_env, start, stop  # sets Django up
from devtools.redis_local import LocalRedis
from jobs.models import Job
from workers.runtime.services import job_submit


def submit(jobs: int, gap: float, *, priority: int | None = None) -> list[str]:
    """One no-op job at a time, each in its own transaction (its wake-up sent at the commit)."""
    tag, ids = uuid.uuid4().hex[:8], []
    for n in range(jobs):
        with transaction.atomic():
            job = job_submit(
                job_type="synthetic",
                payload={"pool": "crawl"},
                priority=priority,
                idempotency_key=f"latency-{tag}-{n}",
                actor="bench",
            )
        ids.append(str(job.job.pk))
        time.sleep(gap)
    return ids


def run(jobs: int, workers: int, gap: float, **extra: str) -> list[float]:
    control = start("control", workers, **extra)
    pool = start("crawl", workers, **extra)
    try:
        time.sleep(8)  # both processes up, the pool's workers idle
        # The submitter is a process of its own with the pools' settings: its wake-ups go to the
        # broker the pool listens on (a Redis URL is read when Django starts).
        submitter = subprocess.run(
            [sys.executable, "-m", "bench.latency", "--submit", str(jobs), "--gap", str(gap)],
            cwd=ROOT,
            env=pool_env(workers, **extra),
            capture_output=True,
            text=True,
            check=True,
        )
        ids = json.loads(submitter.stdout.strip().splitlines()[-1])
        deadline = time.monotonic() + 60
        while Job.objects.filter(pk__in=ids, state="planned").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop(pool)
        stop(control)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM a.started_at - j.created_at) * 1000 FROM jobs_job AS j "
            "JOIN jobs_attempt AS a ON a.job_id = j.id AND a.lease_version = 1 WHERE j.id = ANY(%s)",
            [ids],
        )
        return [float(ms) for (ms,) in cursor.fetchall()]


def summary(name: str, values: list[float], jobs: int) -> str:
    ordered = sorted(values)
    p = lambda share: ordered[min(len(ordered) - 1, int(share * len(ordered)))]  # noqa: E731
    return (
        f"{name:<34} {len(values):>4}/{jobs:<4} {statistics.median(values):>7.1f} {p(0.9):>7.1f} {p(0.99):>7.1f} "
        f"{statistics.mean(values):>7.1f} {max(values):>7.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between submissions")
    parser.add_argument("--submit", type=int, help=argparse.SUPPRESS)  # the submitting child process
    args = parser.parse_args()
    if args.submit:
        print(json.dumps(submit(args.submit, args.gap)))
        return
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    rows = [("ORM broker, poll 0.1 s (default)", run(args.jobs, args.workers, args.gap))]
    redis = LocalRedis().start()
    try:
        rows.append(("Redis wake-ups", run(args.jobs, args.workers, args.gap, LEITSTAND_WAKEUP_REDIS_URL=redis.url)))
    finally:
        redis.close()
    print(f"\n{args.jobs} submissions, {args.gap:g} s apart, to an idle pool of {args.workers} workers")
    print(f"{'wake-up path':<34} {'jobs':>9} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'mean':>7} {'max':>7}")
    for name, values in rows:
        print(summary(name, values, args.jobs))


if __name__ == "__main__":
    main()
