"""An urgent job behind a bulk flood: how long it waits to start while 10,000 bulk jobs run.

Run: .venv/bin/python -m bench.flood [--bulk 10000] [--bulk-ms 10] [--urgent 20] [--workers 2]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

A real control process and a real crawl pool (``runpool``, 2 workers). The baseline, in the same
run: ``--urgent`` synthetic no-op jobs in the urgent lane (priority 0) submitted one at a time to the
idle pool. Then the flood: ``--bulk`` synthetic jobs of ``--bulk-ms`` each in the bulk lane
(priority 9), submitted as batches of 1,000 through the bulk path (``jobs_submit_many``, as
``POST /api/v1/batches`` does); once the pool is busy with them, the same urgent jobs again, one a
second. Latency is database time from the job's ``created_at`` to its attempt's ``started_at``.
The bound the design promises: one bulk job's duration plus the batch budget
(``LEITSTAND_BATCH_BUDGET_SECONDS``) — a worker finishes the batch in hand, then its next claim
takes the most urgent lane first.
"""

import argparse
import time
import uuid

from django.conf import settings
from django.db import connection

from bench.latency import submit, summary
from bench.throughput import count, start, stop  # sets Django up
from workers.runtime.services import jobs_submit_many


def submit_flood(jobs: int, duration_ms: int, tag: str) -> None:
    for first in range(0, jobs, 1000):
        members = [
            {
                "job_type": "synthetic",
                "payload": {"pool": "crawl", "duration_ms": duration_ms},
                "idempotency_key": f"bulk-{tag}-{n}",
                "priority": 9,
            }
            for n in range(first, min(jobs, first + 1000))
        ]
        jobs_submit_many(members, actor="bench", correlation_id=f"flood-{tag}")


def latencies(ids: list[str]) -> list[float]:
    deadline = time.monotonic() + 120
    while count("SELECT count(*) FROM jobs_job WHERE id = ANY(%s::uuid[]) AND state = 'planned'", [ids]):
        if time.monotonic() > deadline:
            raise RuntimeError("urgent jobs did not start within 120 s")
        time.sleep(0.1)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM a.started_at - j.created_at) * 1000 FROM jobs_job AS j "
            "JOIN jobs_attempt AS a ON a.job_id = j.id AND a.lease_version = 1 WHERE j.id = ANY(%s::uuid[])",
            [ids],
        )
        return [float(ms) for (ms,) in cursor.fetchall()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bulk", type=int, default=10000)
    parser.add_argument("--bulk-ms", type=int, default=10, help="each bulk job's duration")
    parser.add_argument("--urgent", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    tag = uuid.uuid4().hex[:8]
    control = start("control", args.workers)
    pool = start("crawl", args.workers)
    try:
        time.sleep(8)  # both processes up, the pool's workers idle
        idle = latencies(submit(args.urgent, 0.3, priority=0))
        submit_flood(args.bulk, args.bulk_ms, tag)
        busy = "SELECT count(*) FROM jobs_job WHERE priority = 9 AND state <> 'planned'"
        while count(busy) < 2 * args.workers:
            time.sleep(0.05)
        flooded = latencies(submit(args.urgent, 1.0, priority=0))
        waiting = count("SELECT count(*) FROM jobs_job WHERE priority = 9 AND state = 'planned'")
    finally:
        stop(pool)
        stop(control)
    bound = args.bulk_ms + settings.LEITSTAND_BATCH_BUDGET_SECONDS * 1000
    print(f"\n{args.urgent} urgent jobs (priority 0), {args.workers} workers; flood: {args.bulk} bulk jobs of")
    print(f"{args.bulk_ms} ms (priority 9), {waiting} of them still waiting when the last urgent job started")
    print(f"bound: one bulk job + the batch budget = {bound:.0f} ms")
    print(f"{'urgent job start':<34} {'jobs':>9} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'mean':>7} {'max':>7}")
    print(summary("idle pool (baseline)", idle, args.urgent))
    print(summary("behind the flood", flooded, args.urgent))


if __name__ == "__main__":
    main()
