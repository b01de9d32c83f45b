"""Engine throughput on PostgreSQL: what fencing, attempts and the transition log cost.

Run: .venv/bin/python -m bench.engine_throughput [--jobs 5000]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

The baseline, measured in the same run on the same table, is the naive queue: per job one
transaction that picks the next planned row with SKIP LOCKED and marks it done — no lease, no
fencing, no attempt or transition rows. Leitstand's path per job is claim + start + complete (three
guarded statements, each writing the job, its attempt and a transition row), one job per claim
(k=1) or ten per claim (k=10); heartbeats are measured against a plain single-row UPDATE.
"""

import argparse
import os
import statistics
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from jobs import leases  # noqa: E402
from jobs.models import Job  # noqa: E402

WORKER = leases.WorkerIdentity(host="bench", pid=os.getpid(), pool="bench")


def make_jobs(n: int) -> str:
    job_type = f"bench-{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        # Bulk-insert (the benchmark measures processing, not creation).
        cursor.execute(
            "INSERT INTO jobs_job (id, type, pool, idempotency_key, correlation_id, state, priority) "
            "SELECT gen_random_uuid(), %s, %s, 'k' || g, 'c' || g, 'planned', g %% 10 FROM generate_series(1, %s) g",
            [job_type, job_type, n],
        )
        # Inserted without their creation transitions: their flow lanes, as the trigger would make them.
        cursor.execute("SELECT jobs_flow_lanes_touch(ARRAY(SELECT id FROM jobs_job WHERE type = %s))", [job_type])
        cursor.execute("ANALYZE jobs_job")
    return job_type


def naive_queue(n: int) -> float:
    job_type = make_jobs(n)
    started = time.perf_counter()
    done = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE jobs_job SET state = 'done' WHERE id = (SELECT id FROM jobs_job WHERE state = 'planned' "
                "AND pool = %s ORDER BY priority, due_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id",
                [job_type],
            )
            if cursor.fetchone() is None:
                break
            done += 1
    assert done == n
    return n / (time.perf_counter() - started)


def leitstand_path(n: int, k: int) -> float:
    job_type = make_jobs(n)
    started = time.perf_counter()
    done = 0
    while claimed := leases.claim(pool=job_type, worker=WORKER, lease_seconds=60, limit=k):
        for job in claimed:
            leases.start(job.id, job.lease_version, actor=WORKER.lease_owner)
            leases.complete(job.id, job.lease_version, actor=WORKER.lease_owner, result_ref="r")
            done += 1
    assert done == n and not Job.objects.filter(type=job_type).exclude(state="result_stored").exists()
    return n / (time.perf_counter() - started)


TRIGGERS = ("jobs_transition_webhook_outbox", "jobs_transition_batch_counters")


def settle_batches(n: int, *, triggers: bool, batch: bool = False, list_index: bool = True) -> float:
    """The runtime's path for jobs that end in done: claim-and-start 100, complete them in one
    statement (result_stored → done). With ``triggers``, the transition log's two statement
    triggers run (the webhook outbox writes one event per job; the batch counters find no batch
    member unless ``batch``, when every job belongs to one batch); without, both are disabled (the
    baseline). Without ``list_index`` the API list's index on the job's last change is dropped
    for the run (and built again after it)."""
    job_type = make_jobs(n)
    with connection.cursor() as cursor:
        if not list_index:
            cursor.execute("DROP INDEX job_changed_idx")
        cursor.execute("TRUNCATE jobs_webhookevent")
        if batch:
            cursor.execute(
                "INSERT INTO jobs_batch (key, name, created_by, correlation_id, request_hash, stats, created_at) "
                "VALUES (%s, 'bench', 'bench', 'bench', '', '{}', now()) RETURNING id",
                [job_type],
            )
            (batch_id,) = cursor.fetchone()
            cursor.execute("UPDATE jobs_job SET batch_id = %s WHERE type = %s", [batch_id, job_type])
        for trigger in TRIGGERS if not triggers else ():
            cursor.execute(f"ALTER TABLE jobs_transition DISABLE TRIGGER {trigger}")
    try:
        started = time.perf_counter()
        while claimed := leases.claim(pool=job_type, worker=WORKER, lease_seconds=60, limit=100, start=True):
            leases.complete_many(
                [leases.Completion(job.id, job.lease_version, settled="done") for job in claimed],
                actor=WORKER.lease_owner,
            )
        elapsed = time.perf_counter() - started
    finally:
        with connection.cursor() as cursor:
            for trigger in TRIGGERS:
                cursor.execute(f"ALTER TABLE jobs_transition ENABLE TRIGGER {trigger}")
            if not list_index:
                cursor.execute("CREATE INDEX job_changed_idx ON jobs_job (state_changed_at, id)")
    assert not Job.objects.filter(type=job_type).exclude(state="done").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_webhookevent")
        assert cursor.fetchone()[0] == (n if triggers else 0)
        if batch and triggers:
            cursor.execute(
                "SELECT sum(done) FROM jobs_batchcounter c JOIN jobs_batch b ON b.id = c.batch_id WHERE b.key = %s",
                [job_type],
            )
            assert cursor.fetchone()[0] == n
    return n / elapsed


def heartbeats(n: int, *, fenced: bool) -> float:
    job_type = make_jobs(1)
    (job,) = leases.claim(pool=job_type, worker=WORKER, lease_seconds=60)
    started = time.perf_counter()
    for _ in range(n):
        if fenced:
            leases.heartbeat(job.id, job.lease_version, lease_seconds=60)
        else:
            with connection.cursor() as cursor:
                cursor.execute("UPDATE jobs_job SET heartbeat_at = clock_timestamp() WHERE id = %s", [job.id])
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    n = args.jobs
    naive_queue(min(n, 500))  # warm-up: connections, plans, caches
    scenarios = {
        "naive queue: pick + mark done, 1 tx/job": lambda: naive_queue(n),
        "leitstand k=1: claim + start + complete": lambda: leitstand_path(n, 1),
        "leitstand k=10: claim 10, start + complete each": lambda: leitstand_path(n, 10),
        "batches of 100 to done, triggers off": lambda: settle_batches(n, triggers=False),
        "batches of 100 to done, outbox + counters": lambda: settle_batches(n, triggers=True),
        "the same, every job a batch member": lambda: settle_batches(n, triggers=True, batch=True),
        "batches of 100 to done, no job_changed_idx": lambda: settle_batches(n, triggers=True, list_index=False),
        "the same with job_changed_idx": lambda: settle_batches(n, triggers=True),
        "plain single-row UPDATE": lambda: heartbeats(n, fenced=False),
        "leitstand heartbeat (fenced, job + attempt)": lambda: heartbeats(n, fenced=True),
    }
    # Rounds interleave the scenarios, so a slow spell of the machine hits all of them alike.
    results = {name: [] for name in scenarios}
    for _ in range(args.rounds):
        for name, run in scenarios.items():
            results[name].append(run())
    median = {name: statistics.median(rates) for name, rates in results.items()}
    baselines = {
        "naive queue: pick + mark done, 1 tx/job",
        "batches of 100 to done, triggers off",
        "batches of 100 to done, no job_changed_idx",
        "plain single-row UPDATE",
    }
    print(f"{args.jobs} jobs per scenario, median of {args.rounds} interleaved rounds")
    print(f"{'scenario':<56} {'per s':>9} {'ratio':>7}  runs")
    baseline = None
    for name in scenarios:
        if name in baselines:
            baseline = median[name]
        runs = " / ".join(f"{rate:.0f}" for rate in results[name])
        label = name + (" (baseline)" if name in baselines else "")
        print(f"{label:<56} {median[name]:>9.0f} {median[name] / baseline:>7.2f}  {runs}")


if __name__ == "__main__":
    main()
