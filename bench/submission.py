"""Bulk submission: ``POST /api/v1/batches`` with 1,000 jobs, server time, against the per-job path it
replaced and a bare multi-row insert — all measured in the same run on the same database.

Run: .venv/bin/python -m bench.submission [--jobs 1000] [--repeat 7] [--preload 200000]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

The PHP core imports URLs as crawl jobs in batches of up to 1,000. Each request is made as a token
holder with ``jobs:write`` and ``jobs:all`` (Django's test client, in this process: server time, no
network), with a new batch key and new job keys each time, against a jobs table preloaded like
``bench.console``'s. Three figures per repeat, median reported:

- **the API** — the whole request: authentication, schema validation of 1,000 jobs, the request
  fingerprints, the batch and its members in one transaction (one multi-row statement), the answer;
- **per job, as before** — the same batch through one ``job_submit`` per member (the path before
  issue 22: two statements per job), called directly, so without the API's own cost;
- **a bare insert** — 1,000 rows with the same columns into a copy of ``jobs_job``'s definition
  without its indexes, triggers or the transition log: the floor PostgreSQL sets on this machine.
"""

import argparse
import json
import os
import statistics
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
os.environ.setdefault("LEITSTAND_ALLOWED_HOSTS", "testserver")
os.environ.setdefault("LEITSTAND_API_RATE_PER_MINUTE", "1000000")
os.environ.setdefault("LEITSTAND_API_JOBS_PER_MINUTE", "100000000")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from api.tokens import token_create  # noqa: E402
from bench.console import load  # noqa: E402
from jobs.batches import batch_create  # noqa: E402
from workers.runtime.services import job_submit  # noqa: E402


def crawl_jobs(run: str, n: int) -> list[dict]:
    return [
        {
            "type": "crawl",
            "payload": {"source_id": 1, "url": f"https://site-{i % 50}.example/page/{run}/{i}", "depth": 0, "run": run},
            "idempotency_key": f"{run}-{i}",
            "priority": 7,
        }
        for i in range(n)
    ]


def via_api(client: Client, n: int) -> float:
    run = uuid.uuid4().hex[:12]
    body = json.dumps({"key": f"import-{run}", "name": f"import {run}", "jobs": crawl_jobs(run, n)})
    started = time.perf_counter()
    response = client.post("/api/v1/batches", body, content_type="application/json")
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 201, response.content[:500]
    assert len(response.json()["job_ids"]) == n
    return elapsed


def per_job(n: int) -> float:
    """The path before issue 22: one ``job_submit`` per member, in one transaction."""
    run = uuid.uuid4().hex[:12]
    jobs = crawl_jobs(run, n)
    started = time.perf_counter()
    with transaction.atomic():
        batch, _ = batch_create(key=f"loop-{run}", name=f"loop {run}", created_by="bench")
        for job in jobs:
            job_submit(
                job_type=job["type"],
                payload=job["payload"],
                idempotency_key=job["idempotency_key"],
                priority=job["priority"],
                actor="bench",
                correlation_id=batch.correlation_id,
                batch_id=batch.pk,
            )
    return (time.perf_counter() - started) * 1000


def bare_insert(n: int) -> float:
    run = uuid.uuid4().hex[:12]
    payloads = [json.dumps(job["payload"]) for job in crawl_jobs(run, n)]
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO bench_bare (id, type, pool, idempotency_key, payload, subject, state, due_at, created_at) "
            "SELECT gen_random_uuid(), 'crawl', 'crawl', k, p, p::jsonb->>'url', 'planned', now(), now() "
            "FROM unnest(%s::text[], %s::jsonb[]) AS t(k, p)",
            [[f"{run}-{i}" for i in range(n)], payloads],
        )
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--preload", type=int, default=200_000)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    if args.preload:
        print(f"preloading {args.preload:,} jobs …", flush=True)
        load(args.preload)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS bench_bare (id uuid, type text, pool text, idempotency_key text, "
            "payload jsonb, subject text, state text, due_at timestamptz, created_at timestamptz)"
        )
        cursor.execute("ALTER TABLE bench_bare SET LOGGED")  # durable like the real table
    _, secret = token_create(name=f"bench-{uuid.uuid4().hex[:6]}", scopes=["jobs:write", "jobs:read", "jobs:all"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    via_api(client, args.jobs), per_job(args.jobs), bare_insert(args.jobs)  # warm: plans, caches
    rows = {"API: POST /api/v1/batches": [], "per job, as before (service only)": [], "bare multi-row insert": []}
    for _ in range(args.repeat):
        rows["API: POST /api/v1/batches"].append(via_api(client, args.jobs))
        rows["per job, as before (service only)"].append(per_job(args.jobs))
        rows["bare multi-row insert"].append(bare_insert(args.jobs))
    medians = {name: statistics.median(values) for name, values in rows.items()}
    api = medians["API: POST /api/v1/batches"]
    print(f"\n{args.jobs:,} jobs per batch, {args.preload:,} jobs preloaded; median of {args.repeat}")
    print(f"{'path':<40} {'ms':>8} {'ms/job':>8} {'÷ API':>8}")
    for name, ms in medians.items():
        print(f"{name:<40} {ms:>8.1f} {ms / args.jobs:>8.3f} {ms / api:>7.2f}×")
    flag = "" if api <= 150 else "  (over the 150 ms goal)"
    print(
        f"\nthe API's batch of {args.jobs:,}: {api:.0f} ms{flag}; {medians['per job, as before (service only)'] / api:.1f}× the per-job path"
    )


if __name__ == "__main__":
    main()
