"""What django-q2's ORM broker (the wake-ups) costs PostgreSQL, idle and under load (issue 19).

Run: .venv/bin/python -m bench.wakeups [--seconds 20] [--jobs 20000] [--workers 2]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set; the server must run on this
machine, its CPU time is read from /proc).

- Idle: every configured pool's ``runpool`` with nothing to do — each cluster's pusher polls its
  queue every ``LEITSTAND_QUEUE_POLL_SECONDS`` — once at the default poll (0.1 s) and once at 1 s, and
  the server alone as the baseline. The server's CPU seconds per second (all its processes) and
  commits per second; the difference between the two poll intervals, divided by the difference in
  polls, is what one poll costs the server.
- Idle with wake-ups through Redis (``LEITSTAND_WAKEUP_REDIS_URL``, a throwaway redis-server):
  what remains for PostgreSQL.
- Load: the throughput bench's no-op jobs through the crawl pool; the broker's row writes
  (``django_q_ormq`` inserted, updated, deleted) and polls beside all row writes of the run.
"""

import argparse
import os
import time

from django.conf import settings
from django.core.management import call_command
from django.db import connection

from bench import throughput  # sets Django up
from bench.throughput import database_costs, leitstand_jobs
from devtools.redis_local import LocalRedis

TICKS = os.sysconf("SC_CLK_TCK")
BROKER_TABLE = """
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0), n_tup_ins, n_tup_upd, n_tup_del
FROM pg_stat_user_tables WHERE relname = 'django_q_ormq'
"""


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def server_cpu_seconds() -> float:
    """CPU time of the whole server so far: the postmaster with the children it reaped, plus the
    live children (backends, background writers, autovacuum)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    postmaster = int(_stat(backend)[1])
    fields = _stat(postmaster)
    total = sum(int(fields[n]) for n in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = _stat(int(entry))
            except OSError:
                continue  # ended meanwhile
            if int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / TICKS


def broker_counts() -> tuple:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(1.1), pg_stat_clear_snapshot()")  # the last second's statistics too
        cursor.execute(BROKER_TABLE)
        return cursor.fetchone()


def idle(seconds: float, poll: str | None, **env: str) -> dict:
    """Server CPU, commits and polls per second over ``seconds``, with every pool running idle at
    ``poll`` (None: no pool runs)."""
    pools = []
    if poll is not None:
        env = {"LEITSTAND_QUEUE_POLL_SECONDS": poll, **env}
        pools = [throughput.start(name, config["workers"], **env) for name, config in settings.LEITSTAND_POOLS.items()]
        time.sleep(8)  # started, registered, settled
    try:
        polls_before, commits_before, cpu_before = broker_counts()[0], database_costs()[0], server_cpu_seconds()
        time.sleep(seconds)
        cpu_after = server_cpu_seconds()
        polls_after, commits_after = broker_counts()[0], database_costs()[0]
    finally:
        for pool in pools:
            throughput.stop(pool)
    return {
        "cpu": (cpu_after - cpu_before) / seconds,
        "commits": (commits_after - commits_before) / seconds,
        "polls": (polls_after - polls_before) / seconds,
    }


def under_load(jobs: int, workers: int) -> dict:
    broker_before, costs_before, cpu_before = broker_counts(), database_costs(), server_cpu_seconds()
    started = time.monotonic()
    rate = leitstand_jobs(jobs, workers)
    elapsed = time.monotonic() - started
    broker_after, costs_after, cpu_after = broker_counts(), database_costs(), server_cpu_seconds()
    written = sum(costs_after[n] - costs_before[n] for n in (1, 2, 3))
    broker_written = sum(broker_after[n] - broker_before[n] for n in (1, 2, 3))
    return {
        "rate": rate,
        "polls": (broker_after[0] - broker_before[0]) / elapsed,
        "wakeups": (broker_after[1] - broker_before[1]) / jobs,
        "broker_rows": broker_written / jobs,
        "rows": written / jobs,
        "cpu_per_job_ms": (cpu_after - cpu_before) / jobs * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    clusters = len(settings.LEITSTAND_POOLS)
    alone = idle(args.seconds, None)
    fast = idle(args.seconds, "0.1")
    slow = idle(args.seconds, "1")
    redis = LocalRedis().start()
    try:
        through_redis = idle(args.seconds, "0.1", LEITSTAND_WAKEUP_REDIS_URL=redis.url)
    finally:
        redis.close()
    per_poll = (fast["cpu"] - slow["cpu"]) / max(fast["polls"] - slow["polls"], 1e-9)
    load = under_load(args.jobs, args.workers)
    print(f"idle, {clusters} pool clusters ({', '.join(settings.LEITSTAND_POOLS)}), {args.seconds:.0f} s each")
    print(f"{'scenario':<40} {'server CPU s/s':>14} {'commits/s':>10} {'polls/s':>8}")
    for label, row in (
        ("server alone (baseline)", alone),
        ("pools idle, poll 0.1 s", fast),
        ("pools idle, poll 1 s", slow),
        ("pools idle, wake-ups through Redis", through_redis),
    ):
        print(f"{label:<40} {row['cpu']:>14.4f} {row['commits']:>10.1f} {row['polls']:>8.1f}")
    print(f"one poll costs the server {per_poll * 1e6:,.0f} µs of CPU")
    hosts = 100 * 4 * 10  # a hundred hosts, four pools each, ten polls a second
    print(f"a hundred hosts with four pools at 0.1 s: {hosts:,} polls/s = {hosts * per_poll:.2f} cores of the server")
    print(
        f"under load ({args.jobs} no-op jobs, {args.workers} workers, {load['rate']:,.0f} jobs/s): "
        f"{load['wakeups']:.3f} wake-ups per job, broker rows {load['broker_rows']:.3f} of {load['rows']:.1f} "
        f"row writes per job ({load['broker_rows'] / load['rows']:.1%}), {load['polls']:.0f} polls/s, "
        f"server CPU {load['cpu_per_job_ms']:.3f} ms per job"
    )


if __name__ == "__main__":
    main()
