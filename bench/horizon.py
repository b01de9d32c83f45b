"""A pinned horizon: what one long transaction on the primary does to the pools running at capacity.

Run: .venv/bin/python -m bench.horizon [--rate 3000] [--baseline 60] [--pin 240] [--after 60] [--workers 2]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

A real control process and a real crawl pool (``runpool``) run while a producer offers synthetic
no-op jobs at ``--rate`` a second (ten submissions a second through ``jobs_submit_many``, the path
``POST /api/v1/batches`` takes); offered above what the pool completes, so it works at capacity
with a backlog. After a warm-up, the baseline phase; then another session opens a ``REPEATABLE
READ`` transaction, takes its snapshot and sits idle in it for ``--pin`` seconds, with
``idle_in_transaction_session_timeout`` off for itself — a long report, a forgotten ``psql``, a
``pg_dump`` (``manage.py db backup`` is one for as long as it runs). While it lives, no row version
that died after its snapshot can be removed, by vacuum or by index clean-up. Then the transaction
ends and the after phase shows the recovery.

Per phase (and per minute of the pin), all in the same run: jobs completed a second (attempts that
ended in the window), against the baseline; due → start (the job's ``due_at`` to its first
attempt's ``started_at``, for attempts started in the window) median and p99; and the dead tuples
of the queue's tables at the window's end and at their highest (``pg_stat_user_tables``, sampled
every 5 s; a partitioned table's partitions summed). Figures are computed from the database after
the pools have stopped (only two samplers run during it: the dead tuples every 5 s, the statements
running in other sessions every 0.1 s — what the database is busy with); the claim's selection is
explained (``EXPLAIN (ANALYZE, BUFFERS)``, without its lock) at the end of the baseline and just before
the pin ends, to show what a claim walks, with a batch completion, the reaper's statement and the
supervisors' look for silent lease owners (each rolled back).
"""

import argparse
import os
import re
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import psycopg
from django.db import connection

from bench.throughput import count, start, stop  # sets Django up
from workers.runtime.services import jobs_submit_many

# The queue's own tables, and the django-q2 broker's.
TABLES = ("jobs_job", "jobs_attempt", "jobs_transition", "jobs_stepevent", "django_q_ormq")
DEAD_TUPLES = """
SELECT coalesce(p.relname, c.relname) AS name, sum(s.n_dead_tup), sum(s.n_live_tup)
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
LEFT JOIN pg_inherits AS i ON i.inhrelid = c.oid
LEFT JOIN pg_class AS p ON p.oid = i.inhparent
WHERE coalesce(p.relname, c.relname) = ANY(%s)
GROUP BY 1
"""


class Producer(threading.Thread):
    """Synthetic no-op jobs at ``rate`` a second, in ten submissions a second, until stopped."""

    def __init__(self, rate: int) -> None:
        super().__init__(daemon=True)
        self.rate, self.stopping, self.submitted, self.behind = rate, threading.Event(), 0, 0
        self.tag = uuid.uuid4().hex[:8]

    def run(self) -> None:
        tick, n = time.monotonic(), 0
        chunk = max(1, self.rate // 10)
        while not self.stopping.is_set():
            members = [
                {"job_type": "synthetic", "payload": {"pool": "crawl"}, "idempotency_key": f"h-{self.tag}-{n + i}"}
                for i in range(chunk)
            ]
            jobs_submit_many(members, actor="bench", correlation_id=f"horizon-{self.tag}")
            n += chunk
            self.submitted = n
            tick += 0.1
            if tick < time.monotonic():
                self.behind += 1  # the producer itself could not keep the rate this tick
            self.stopping.wait(max(0.0, tick - time.monotonic()))
        connection.close()


class DeadTuples(threading.Thread):
    """Samples the tables' dead tuples every 5 s; ``samples`` holds (database time, {table: dead})."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping, self.samples = threading.Event(), []

    def run(self) -> None:
        while not self.stopping.is_set():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_stat_clear_snapshot(), clock_timestamp()")
                at = cursor.fetchone()[1]
                cursor.execute(DEAD_TUPLES, [list(TABLES)])
                self.samples.append((at, {name: int(dead) for name, dead, _ in cursor.fetchall()}))
            self.stopping.wait(5)
        connection.close()


def _shape(sql: str) -> str:
    """A statement's text without parameters and spacing, as far as it tells statements apart: 600
    characters (``pg_stat_activity`` keeps the first 1,024 bytes). At 100, the reaper, the rescue,
    the retry promotion and the review queue were one shape, and the three bulk transitions another."""
    return re.sub(r"\s+", " ", re.sub(r"%\(\w+\)s|\$\d+", "?", sql)).strip()[:600]


def _layers() -> tuple:
    from jobs.reads import reads
    from jobs.sql import queries

    return queries, reads


def _names() -> dict[str, str]:
    return {_shape(getattr(q, name)): name for q in _layers() for name in q.names()}


class Activity(threading.Thread):
    """What the database is busy with: the statements running in other sessions, sampled every
    0.1 s (a statement of the SQL layer by its name, another by its first words)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping, self.samples, self.names = threading.Event(), [], _names()
        assert len(set(self.names.values())) == sum(len(q.names()) for q in _layers()), "two statements, one shape"

    def run(self) -> None:
        while not self.stopping.is_set():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT clock_timestamp(), query FROM pg_stat_activity "
                    "WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
                rows = cursor.fetchall()
            if rows:
                at = rows[0][0]
                for _, query in rows:
                    shape = _shape(query)
                    self.samples.append((at, self.names.get(shape, shape[:60])))
            self.stopping.wait(0.1)
        connection.close()


def busy(samples: list, begin, end, top: int = 6) -> str:
    """The statements most often running in [begin, end), as shares of the samples."""
    inside = Counter(name for at, name in samples if begin <= at < end)
    total = sum(inside.values()) or 1
    return "; ".join(f"{name} {n / total:.0%}" for name, n in inside.most_common(top))


def database_time():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def pinned(seconds: float) -> str:
    """Hold a REPEATABLE READ snapshot, idle, for ``seconds`` (another session: not Django's); the
    claim's plan just before it ends."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        pin.execute("SELECT count(*) FROM jobs_job WHERE state = 'planned'")  # the snapshot is taken here
        time.sleep(seconds)
        plan = claim_plan() + "\n  the batch completion of 100 jobs:\n" + completion_plan() + "\n" + sweep_plans()
        pin.execute("COMMIT")
    return plan


# The claim's selection (jobs_claim_due_skip_locked) without its lock, so that looking at it takes no
# job from the workers: the whole line, and from the front (as a worker in a backlog claims).
CLAIM_SELECTION = """
SELECT j.due_at FROM jobs_job AS j
WHERE j.state = 'planned' AND j.pool = 'crawl' AND j.due_at <= (SELECT leitstand_now())
  AND j.due_at >= %s::timestamptz
ORDER BY j.priority, j.due_at, j.id LIMIT 100
"""
EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) "


def claim_plan() -> str:
    """The claim's selection of 100 jobs, as PostgreSQL ran it: the index, buffers and time."""
    lines = []
    with connection.cursor() as cursor:
        cursor.execute(CLAIM_SELECTION, ["-infinity"])
        front = cursor.fetchone()
        for label, due_from in (("the whole line", "-infinity"), ("from the front", front[0] if front else None)):
            if due_from is None:
                continue
            cursor.execute(EXPLAIN + CLAIM_SELECTION, [due_from])
            lines += [f"  {label}:", *(f"    {line}" for (line,) in cursor.fetchall())]
    return "\n".join(lines)


class _Explained(Exception):
    """Raised once the statement has been explained, to roll back what ran it."""


def _explained(statement: str, run) -> list[str]:
    """The plan of ``statement`` (one of the engine's) as PostgreSQL ran it inside ``run()``, which is
    rolled back at once: nothing it did stays."""
    from django.db import transaction

    from jobs import leases

    plan, fetch_all = [], leases._fetch_all

    def explained(sql, params):
        if sql is not statement:
            return fetch_all(sql, params)
        plan.extend(row[0] for row in fetch_all(EXPLAIN + sql, params))
        raise _Explained

    leases._fetch_all = explained
    try:
        with transaction.atomic():
            run()
    except _Explained:
        pass
    finally:
        leases._fetch_all = fetch_all
    return plan


def completion_plan() -> str:
    """The batch completion of 100 jobs (jobs_store_results_if_lease_held), as PostgreSQL ran it: this
    process claims them like a worker, completes them under EXPLAIN (ANALYZE, BUFFERS) and rolls both
    back, so the jobs stay where they were."""
    from jobs import leases
    from jobs.sql import queries

    worker = leases.WorkerIdentity(host="bench-explain", pid=os.getpid(), pool="crawl")

    def complete():
        claimed = leases.claim(pool="crawl", worker=worker, lease_seconds=60, limit=100, start=True)
        leases.complete_many([leases.Completion(c.id, c.lease_version) for c in claimed], actor="bench")

    return "\n".join(f"    {line}" for line in _explained(queries.jobs_store_results_if_lease_held, complete))


def sweep_plans() -> str:
    """The reaper's pass (its statement explained, then rolled back) and the supervisor's look for
    silent lease owners, as PostgreSQL ran them: both walk the leased set (``job_leased_idx``)."""
    from jobs import leases
    from jobs.reads import composed
    from jobs.retry import RetryPolicy
    from jobs.sql import queries

    plan = _explained(
        queries.jobs_reap_if_lease_expired, lambda: leases.reap_expired(grace_seconds=5, policy=RetryPolicy())
    )
    lines = ["  the reaper's pass:", *(f"    {line}" for line in plan)]
    with connection.cursor() as cursor:
        cursor.execute(EXPLAIN + composed("lease_owners_silent"), {"host": "bench:", "silent": 20})
        lines += ["  the silent lease owners:", *(f"    {line}" for (line,) in cursor.fetchall())]
    return "\n".join(lines)


def window(label: str, begin, end, samples: list) -> dict:
    """The figures of one window [begin, end) of database time."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM jobs_attempt WHERE finished_at >= %s AND finished_at < %s AND job_type = 'synthetic'",
            [begin, end],
        )
        completed = cursor.fetchone()[0]
        cursor.execute(
            """
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY w), percentile_cont(0.99) WITHIN GROUP (ORDER BY w)
            FROM (SELECT extract(epoch FROM a.started_at - j.due_at) AS w
                  FROM jobs_attempt AS a JOIN jobs_job AS j ON j.id = a.job_id
                  WHERE a.lease_version = 1 AND a.started_at >= %s AND a.started_at < %s
                    AND a.job_type = 'synthetic') AS waits
            """,
            [begin, end],
        )
        p50, p99 = cursor.fetchone()
    inside = [dead for at, dead in samples if begin <= at < end]
    seconds = (end - begin).total_seconds()
    return {
        "label": label,
        "seconds": seconds,
        "rate": completed / seconds,
        "p50": p50 or 0.0,
        "p99": p99 or 0.0,
        "dead_end": inside[-1] if inside else {},
        "dead_max": {table: max(d.get(table, 0) for d in inside) for table in TABLES} if inside else {},
    }


def report(rows: list[dict], baseline: dict) -> None:
    print(f"{'phase':<26} {'s':>5} {'done/s':>8} {'ratio':>6} {'due→start p50':>14} {'p99':>8}")
    for row in rows:
        print(
            f"{row['label']:<26} {row['seconds']:>5.0f} {row['rate']:>8.0f} {row['rate'] / baseline['rate']:>6.2f} "
            f"{row['p50']:>13.2f}s {row['p99']:>7.2f}s"
        )
    print()
    print("dead tuples at the end of each phase (highest within it)")
    print(f"{'phase':<26} " + " ".join(f"{table:>22}" for table in TABLES))
    for row in rows:
        cells = (f"{row['dead_end'].get(table, 0):>10,} ({row['dead_max'].get(table, 0):>9,})" for table in TABLES)
        print(f"{row['label']:<26} " + " ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=3000, help="jobs offered a second")
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--baseline", type=float, default=60)
    parser.add_argument("--pin", type=float, default=240)
    parser.add_argument("--after", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    control, pool = start("control", args.workers), start("crawl", args.workers)
    producer, sampler, activity = Producer(args.rate), DeadTuples(), Activity()
    try:
        time.sleep(8)  # both processes up
        producer.start()
        sampler.start()
        activity.start()
        time.sleep(args.warmup)
        marks = [("baseline", database_time())]
        time.sleep(args.baseline)
        plans = {
            "at the end of the baseline": claim_plan()
            + "\n  the batch completion of 100 jobs:\n"
            + completion_plan()
            + "\n"
            + sweep_plans()
        }
        marks.append(("pinned", database_time()))
        plans["at the end of the pin"] = pinned(args.pin)
        marks.append(("after", database_time()))
        time.sleep(args.after)
        marks.append(("end", database_time()))
    finally:
        for thread in (producer, sampler, activity):
            thread.stopping.set()
        for thread in (producer, sampler, activity):
            thread.join(timeout=30)
        stop(pool)
        stop(control)
    backlog = count("SELECT count(*) FROM jobs_job WHERE state = 'planned'")
    (_, begin), (_, pin_begin), (_, pin_end), (_, end) = marks
    baseline = window("baseline", begin, pin_begin, sampler.samples)
    rows = [baseline]
    minute, n = pin_begin, 1
    while (pin_end - minute).total_seconds() >= 1:
        upto = min(pin_end, minute + timedelta(seconds=60))
        rows.append(window(f"pinned, minute {n}", minute, upto, sampler.samples))
        minute, n = upto, n + 1
    rows.append(window("pinned, whole", pin_begin, pin_end, sampler.samples))
    rows.append(window("after the pin", pin_end, end, sampler.samples))
    print(
        f"{args.workers} workers; {producer.submitted:,} jobs offered at {args.rate}/s "
        f"(the producer fell behind in {producer.behind} of its ticks); {backlog:,} still planned at the end"
    )
    report(rows, baseline)
    print("\nwhat the database was busy with (statements running in other sessions, sampled every 0.1 s)")
    last_minute = max(pin_begin, pin_end - timedelta(seconds=60))
    for label, (since, until) in {
        "baseline": (begin, pin_begin),
        "the pin's last minute": (last_minute, pin_end),
        "after the pin": (pin_end, end),
    }.items():
        print(f"  {label}: {busy(activity.samples, since, until)}")
    for when, plan in plans.items():
        print(f"\nthe claim's selection of 100 jobs {when}:\n{plan}")


if __name__ == "__main__":
    main()
