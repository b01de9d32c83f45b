"""History at scale: what a day of history costs, whether the pools stay fast over it with retention
active, and how fast a day leaves.

Run: .venv/bin/python -m bench.soak [--jobs 10000000] [--days 30] [--minutes 10] [--rate 200]
(uses a throwaway embedded PostgreSQL in $TMPDIR unless DATABASE_URL is set; it runs as the owner
role; 10 M jobs need about 20 GB of free disk while it runs and about 35 minutes).

1. **History**: builds, server-side with ``generate_series``, the history of ``--jobs`` ended jobs
   spread evenly over the ``--days`` days before today — each job with an attempt, four transitions
   and a step event, as a no-op job writes them, its ID a UUIDv7 of its time as the engine gives it
   (``uuidv7``: PostgreSQL 18) — into the daily partitions of the transition log
   and the step events, then ``VACUUM ANALYZE`` (where autovacuum would be by then). It reports rows
   and bytes per million jobs.
2. **Pools over it, retention active**: retention is set so that the oldest day is past its time
   (``done`` jobs kept ``--days`` − 1 days and the part of today gone by), the retention sweep runs
   every 2 s for 1 s in the control process, archiving into a temporary directory. The demo web
   (two local sites), the control process and the crawl and analysis pools start. A producer submits
   synthetic jobs with three steps at ``--rate`` per second, and a crawl run over the demo web starts
   every 30 s, for ``--minutes``. At the start and at the end, ``--rounds`` rounds each measure: a
   burst of ``--burst`` synthetic jobs (jobs/s between the first and the last completion), claim
   latency (the engine's claim statement on a probe job, p50/p99, and the time from due to claimed
   of the producer's jobs), one crawl run over the demo web until its tree settles, the console
   pages of ``bench/console.py``, and a fixed calibration load (Python and SQL) that shows how much
   the machine itself drifted between the two. Table and index sizes and dead tuples are read at the
   start and at the end.
3. **A day's purge**: whatever of the oldest day the run's retention has not archived yet is archived
   and purged by the same sweep in this process; then that day's rows are deleted with
   ``DELETE … WHERE part_day = <day>`` inside a transaction that is rolled back (the baseline, on
   the very rows), and ``leitstand_partitions_drop`` drops the day's partitions whole (timed). The
   filesystem's own share — freeing a file of the partitions' size in the same directory — is
   measured beside it, with the filesystem's mount options (online ``discard`` makes it slower).
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
os.environ.setdefault("LEITSTAND_ALLOWED_HOSTS", "testserver")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import override_settings  # noqa: E402

from bench.throughput import plan_synthetic  # noqa: E402
from workers.pipeline.services import crawl_start  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HISTORY = ("jobs_job", "jobs_attempt", "jobs_transition", "jobs_stepevent")
QUIET = ("jobs_transition_webhook_outbox", "jobs_transition_batch_counters")
STEPS = ["fetch", "parse", "store"]
OPEN_STATES = ["planned", "reserved", "running", "failed"]


def sql(statement: str, parameters=()) -> list:
    with connection.cursor() as cursor:
        cursor.execute(statement, parameters if isinstance(parameters, dict) else list(parameters))
        return cursor.fetchall() if cursor.description else []


# --- 1. history -----------------------------------------------------------------------------------


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
                SELECT uuidv7(d - now()), 'synthetic', 'crawl', 'soak-' || %(back)s || '-' || n, 'soak-' || n, 'done',
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
        sql(f"VACUUM ANALYZE {table}")
    return time.perf_counter() - started


def table_bytes(table: str) -> int:
    """A table with its indexes and TOAST; for a partitioned one, the sum of its partitions."""
    return sql(
        "SELECT pg_total_relation_size(%(t)s::regclass) + coalesce((SELECT sum(pg_total_relation_size(inhrelid)) "
        "FROM pg_inherits WHERE inhparent = %(t)s::regclass), 0)::bigint",
        {"t": table},
    )[0][0]


def storage() -> dict:
    """Per history table: live and dead tuples (statistics), table bytes, index bytes."""
    figures = {}
    for table in HISTORY:
        live, dead, heap, indexes = sql(
            """
            SELECT coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_dead_tup), 0)::bigint,
                   coalesce(sum(pg_table_size(c.oid)), 0)::bigint, coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint
            FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid
            WHERE c.oid = %(t)s::regclass OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %(t)s::regclass)
            """,
            {"t": table},
        )[0]
        figures[table] = {"live": live, "dead": dead, "table": heap, "indexes": indexes}
    figures["archive index"] = table_bytes("dashboard_archivedjob")
    figures["database"] = sql("SELECT pg_database_size(current_database())")[0][0]
    return figures


# --- 2. pools over the history ----------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Processes:
    """The demo web, the control process and the crawl and analysis pools, as the demo starts them."""

    def __init__(self, env: dict, web: str, log_dir: Path) -> None:
        self.env, self.web, self.log_dir, self.running = env, web, log_dir, []

    def start(self, name: str, *command: str) -> None:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        self.running.append(
            subprocess.Popen(
                [sys.executable, "manage.py", *command], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        )

    def __enter__(self):
        self.start("demoweb", "demoweb", "--ports", self.web.replace("127.0.0.1:", ""))
        for _ in range(100):
            try:
                for target in self.web.split(","):
                    socket.create_connection(tuple(target.rsplit(":", 1)), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        subprocess.run(
            [sys.executable, "manage.py", "demo_data", "--web", self.web, "--no-crawl"],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for name in ("control", "crawl", "analysis"):
            self.start(name, "runpool", name)
        return self

    def __exit__(self, *exc) -> None:
        for process in self.running:
            process.terminate()
        for process in self.running:
            process.wait(timeout=60)


def submit(count: int, tag: str) -> None:
    with transaction.atomic():
        for _ in range(count):
            plan_synthetic(pool="crawl", tag=f"soak-{tag}", payload={"steps": STEPS, "settle": True})


class Producer(threading.Thread):
    """Synthetic jobs at a fixed rate, in ten submissions a second, while the pools run."""

    def __init__(self, rate: int) -> None:
        super().__init__(daemon=True)
        self.rate, self.stopping, self.submitted = rate, threading.Event(), 0

    def run(self) -> None:
        tick = time.monotonic()
        while not self.stopping.is_set():
            submit(self.rate // 10, "steady")
            self.submitted += self.rate // 10
            tick += 0.1
            self.stopping.wait(max(0.0, tick - time.monotonic()))
        connection.close()


def burst(count: int, tag: str) -> float:
    """Jobs/s of ``count`` jobs queued at once, between the first and the last completion."""
    submit(count, tag)
    started = time.monotonic()
    first = None
    while time.monotonic() - started < 600:
        left = sql(
            "SELECT count(*) FROM jobs_job WHERE correlation_id = %s AND state = ANY(%s)", [f"soak-{tag}", OPEN_STATES]
        )[0][0]
        now = time.monotonic()
        if first is None and left < count:
            first, first_done = now, count - left
        if left == 0:
            return (count - first_done) / max(now - first, 1e-6)
        time.sleep(0.05)
    raise RuntimeError(f"the burst {tag} did not finish in 10 minutes")


def claim_latency(probes: int) -> list[float]:
    """The engine's claim statement, in ms, on one probe job of a pool no worker serves, released
    after every claim (so each claim finds exactly one due job, in a table of millions)."""
    from jobs import leases

    plan_synthetic(pool="soak-probe", tag="soak-probe", payload={}, max_attempts=probes + 5)
    worker = leases.WorkerIdentity.of_this_process("soak-probe")
    timings = []
    for _ in range(probes):
        started = time.perf_counter()
        (claimed,) = leases.claim(pool="soak-probe", worker=worker, lease_seconds=60, start=True)
        timings.append((time.perf_counter() - started) * 1000)
        leases.release(claimed.id, claimed.lease_version, actor="bench", reason="probe")
    return timings


def pickup_latency(since: datetime) -> list[float]:
    """Due → claimed of the producer's jobs claimed since ``since``, in ms."""
    rows = sql(
        "SELECT extract(epoch FROM a.claimed_at - coalesce(j.due_at, j.created_at)) * 1000 FROM jobs_attempt AS a "
        "JOIN jobs_job AS j ON j.id = a.job_id WHERE j.correlation_id = 'soak-steady' AND a.claimed_at >= %s",
        [since],
    )
    return [row[0] for row in rows]


def crawl_run(tag: str) -> tuple[float, int]:
    """One crawl run over the demo web, until every job of its tree has settled: seconds, jobs."""
    started = time.monotonic()
    roots = [s.job.id for s in crawl_start(actor="bench", run=f"soak-{tag}")]
    while time.monotonic() - started < 300:
        jobs, open_jobs = sql(
            """
            WITH RECURSIVE tree AS (
                SELECT id, state FROM jobs_job WHERE id = ANY(%s)
                UNION ALL SELECT j.id, j.state FROM jobs_job AS j JOIN tree ON j.parent_id = tree.id
            )
            SELECT count(*), count(*) FILTER (WHERE state = ANY(%s)) FROM tree
            """,
            [roots, OPEN_STATES],
        )[0]
        if not open_jobs:
            return time.monotonic() - started, jobs
        time.sleep(0.1)
    raise RuntimeError(f"the crawl run {tag} did not settle in 5 minutes")


def calibration() -> float:
    """A fixed load (Python and SQL), in ms: how fast the machine itself is this minute."""
    started = time.perf_counter()
    sum(i * i for i in range(1_000_000))
    sql("SELECT sum(g) FROM generate_series(1, 2000000) AS g")
    return (time.perf_counter() - started) * 1000


def console_pages(client) -> dict[str, float]:
    from bench.console import measure, pages, samples

    return {name: measure(client, url, 3)[0] for name, url in pages(*samples()).items()}


def measurement_round(label: str, number: int, args, client) -> dict:
    tag = f"{label}-{number}"
    figures = {"calibration ms": calibration()}
    figures["jobs/s (burst)"] = burst(args.burst, tag)
    claims = claim_latency(200)
    figures["claim p50 ms"] = statistics.median(claims)
    figures["claim p99 ms"] = statistics.quantiles(claims, n=100)[98]
    figures["crawl run s"], figures["crawl run jobs"] = crawl_run(tag)
    figures.update(console_pages(client))
    print(f"  {label} round {number + 1}: {figures['jobs/s (burst)']:,.0f} jobs/s", flush=True)
    return figures


def steady(minutes: float, rate: int) -> tuple[int, list[float]]:
    """The pools under a steady load, retention active, a crawl run every 30 s."""
    since = sql("SELECT now()")[0][0]
    producer = Producer(rate)
    producer.start()
    end = time.monotonic() + minutes * 60
    runs = 0
    while time.monotonic() < end:
        crawl_start(actor="bench", run=f"soak-steady-{runs}")
        runs += 1
        time.sleep(min(30, max(0, end - time.monotonic())))
    producer.stopping.set()
    producer.join()
    return producer.submitted, pickup_latency(since)


# --- 3. a day's purge --------------------------------------------------------------------------------


def archive_day(day) -> int:
    """The retention sweep, in this process, until no job of ``day`` is left (returns sweeps run)."""
    from history.retention import retention_sweep

    sweeps = 0
    while sql("SELECT count(*) FROM jobs_job WHERE finished_at < %s::date + 1", [day])[0][0]:
        report = retention_sweep(seconds_per_round=settings.LEITSTAND_RETENTION["seconds_per_round"])
        sweeps += 1
        if report.stopped or not report.purged:
            raise RuntimeError(f"the sweep left jobs of {day}: {report}")
    return sweeps


def filesystem_of(path: Path) -> str:
    best = ("", "?", "")
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind, options, *_ = line.split()
        if str(path).startswith(mount) and len(mount) >= len(best[0]):
            best = (mount, kind, options)
    return f"{best[1]} on {best[0]} ({best[2]})"


def release_cost(size: int, directory: Path) -> float:
    """What freeing ``size`` bytes costs the filesystem itself: a file written, synced, truncated (ms)."""
    path = directory / f"soak-release-{uuid.uuid4().hex}"
    block = os.urandom(1 << 20)
    with open(path, "wb") as file:
        for _ in range(size >> 20):
            file.write(block)
        file.flush()
        os.fsync(file.fileno())
    started = time.perf_counter()
    os.truncate(path, 0)
    took = (time.perf_counter() - started) * 1000
    path.unlink()
    return took


def purge_day(day) -> tuple[float, float, int, int]:
    """The baseline DELETE (rolled back) and the partition drop on the same rows: ms, ms, rows, bytes."""
    rows = sql("SELECT count(*) FROM jobs_transition WHERE part_day = %s", [day])[0][0]
    rows += sql("SELECT count(*) FROM jobs_stepevent WHERE part_day = %s", [day])[0][0]
    size = sum(table_bytes(f"{table}_p{day:%Y%m%d}") for table in ("jobs_transition", "jobs_stepevent"))
    started = time.perf_counter()
    with transaction.atomic():
        sql("SELECT set_config('leitstand.allow_purge', 'on', true)")  # the owner, through the append-only trigger
        sql("DELETE FROM jobs_transition WHERE part_day = %s", [day])
        sql("DELETE FROM jobs_stepevent WHERE part_day = %s", [day])
        baseline = (time.perf_counter() - started) * 1000
        transaction.set_rollback(True)
    started = time.perf_counter()
    dropped = sql("SELECT leitstand_partitions_drop(%s::date + 1)", [day])[0][0]
    partitioned = (time.perf_counter() - started) * 1000
    assert dropped == 2, f"{dropped} partitions dropped"
    return baseline, partitioned, rows, size


# --- report ------------------------------------------------------------------------------------------


def mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def compare(start: list[dict], end: list[dict]) -> None:
    """Medians of the rounds; the last column divides by how much slower the machine itself was at
    the end (the calibration's ratio), for figures that are times."""
    median = {
        name: (statistics.median(r[name] for r in start), statistics.median(r[name] for r in end)) for name in start[0]
    }
    machine = median["calibration ms"][1] / median["calibration ms"][0]
    print(f"\n{'median of the rounds':<44} {'start':>10} {'end':>10} {'end/start':>10} {'÷ machine':>10}")
    for name, (a, b) in median.items():
        ratio = b / a if a else float("nan")
        corrected = (
            "" if name in ("calibration ms", "crawl run jobs", "jobs/s (burst)") else f"{ratio / machine:>9.2f}×"
        )
        print(f"{name:<44} {a:>10,.1f} {b:>10,.1f} {ratio:>9.2f}× {corrected:>10}")


def storage_table(before: dict, after: dict, final: dict) -> None:
    print(f"\n{'table':<16} {'':<10} {'start':>12} {'end of run':>12} {'after drop':>12}")
    for table in HISTORY:
        for key in ("live", "dead"):
            print(
                f"{table:<16} {key + ' rows':<10} {before[table][key]:>12,} {after[table][key]:>12,} {final[table][key]:>12,}"
            )
        for key in ("table", "indexes"):
            print(
                f"{table:<16} {key:<10} {mib(before[table][key]):>12} {mib(after[table][key]):>12} "
                f"{mib(final[table][key]):>12}"
            )
    for key in ("archive index", "database"):
        print(f"{key:<27} {mib(before[key]):>12} {mib(after[key]):>12} {mib(final[key]):>12}")
    archived = sql("SELECT count(*) FROM dashboard_archivedjob")[0][0]
    print(
        f"the archive index (dashboard_archivedjob, kept in the database): {final['archive index'] / max(archived, 1):,.0f} bytes per archived job"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=10, help="the steady run between start and end")
    parser.add_argument("--rate", type=int, default=200, help="synthetic jobs per second during the steady run")
    parser.add_argument("--burst", type=int, default=3000, help="jobs per throughput burst")
    parser.add_argument("--rounds", type=int, default=2, help="measurement rounds at the start and at the end")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)

    # 1. history
    partitions_for_past_days(args.days)
    print(f"building the history of {args.jobs:,} jobs over {args.days} days …", flush=True)
    took = build(args.jobs, args.days)
    built = {table: table_bytes(table) for table in HISTORY}
    rows = {table: sql(f"SELECT count(*) FROM {table}")[0][0] for table in HISTORY}
    print(f"built in {took:.0f} s ({args.jobs / took:,.0f} jobs/s)")
    print(f"\n{'table':<18} {'rows':>14} {'bytes':>16} {'per million jobs':>18}")
    for table in HISTORY:
        print(f"{table:<18} {rows[table]:>14,} {built[table]:>16,} {mib(built[table] / args.jobs * 1e6):>18}")
    total = sum(built.values())
    print(f"{'all':<18} {sum(rows.values()):>14,} {total:>16,} {mib(total / args.jobs * 1e6):>18}")

    # 2. the pools over it, retention active: the oldest day is past its time
    oldest = sql("SELECT min(finished_at)::date FROM jobs_job")[0][0]
    now = sql("SELECT now()")[0][0]
    horizon = datetime.combine(oldest + timedelta(days=1), datetime.min.time(), tzinfo=dt_timezone.utc)
    done_days = (now - horizon).total_seconds() / 86400
    archive_dir = Path(tempfile.mkdtemp(prefix="leitstand-soak-archive-"))
    web = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    policy = {
        "LEITSTAND_RETENTION_DONE_DAYS": f"{done_days:.6f}",
        "LEITSTAND_RETENTION_EVERY_SECONDS": "2",
        "LEITSTAND_RETENTION_SECONDS_PER_ROUND": "1",
        "LEITSTAND_PARTITION_KEEP_DAYS": str(args.days + 1),  # the timed drop in part 3 is the first
        "LEITSTAND_ARCHIVE_DIR": str(archive_dir),
    }
    env = {
        **os.environ,
        **policy,
        "LEITSTAND_HTTP_ALLOWED_TARGETS": web,
        "LEITSTAND_RUN_DIR": str(ROOT / "var" / "bench-run"),
        "PYTHONPATH": str(ROOT),
    }
    # The same policy in this process (its options are read again when a setting is overridden).
    retained = settings.LEITSTAND_RETENTION
    override_settings(
        LEITSTAND_RETENTION={
            **retained,
            "partition_keep_days": args.days + 1,
            "days": {**retained["days"], "done": done_days},
        },
        LEITSTAND_ARCHIVE_DIR=archive_dir,
    ).enable()
    log_dir = Path(tempfile.mkdtemp(prefix="leitstand-soak-logs-"))

    from django.contrib.auth import get_user_model
    from django.test import Client

    from dashboard.roles import OPERATORS, roles_ensure

    user = get_user_model().objects.create_user("soak-operator", password="x" * 12, is_staff=True)
    user.groups.add(roles_ensure()[OPERATORS])
    client = Client()
    client.force_login(user)
    before = storage()
    print(f"\npools start (logs in {log_dir}); retention archives the {oldest} day into {archive_dir}", flush=True)
    with Processes(env, web, log_dir):
        time.sleep(5)  # the pools' first claims, the control process's first rounds
        start = [measurement_round("start", n, args, client) for n in range(args.rounds)]
        print(f"  steady run: {args.rate} jobs/s for {args.minutes:g} min, a crawl run every 30 s", flush=True)
        submitted, pickups = steady(args.minutes, args.rate)
        end = [measurement_round("end", n, args, client) for n in range(args.rounds)]
        after = storage()
    archived_in_run = sql("SELECT count(*) FROM dashboard_archivedjob")[0][0]
    compare(start, end)
    if pickups:
        quantiles = statistics.quantiles(pickups, n=100)
        print(
            f"\nsteady run: {submitted:,} jobs submitted; due → claimed p50 {quantiles[49]:.0f} ms, "
            f"p99 {quantiles[98]:.0f} ms ({len(pickups):,} claims)"
        )
    print(f"retention archived and purged {archived_in_run:,} jobs during the run")

    # 3. a day's purge
    sweeps = archive_day(oldest)
    sql("VACUUM ANALYZE jobs_job")  # what autovacuum does after the purge, before a day's drop is due
    print(
        f"the rest of {oldest} archived in {sweeps} sweeps; {sql('SELECT count(*) FROM dashboard_archivedjob')[0][0]:,} in all"
    )
    baseline, partitioned, day_rows, day_bytes = purge_day(oldest)
    final = storage()
    storage_table(before, after, final)
    data_dir = Path(tempfile.gettempdir())
    print(f"\none day's history: {day_rows:,} rows, {mib(day_bytes)} with indexes")
    print(f"{'DELETE … WHERE part_day (baseline, rolled back)':<52} {baseline:>10,.0f} ms")
    print(f"{'leitstand_partitions_drop':<52} {partitioned:>10,.0f} ms   {baseline / partitioned:,.0f}× faster")
    print(
        f"{'  of which the filesystem frees the files (about)':<52} {release_cost(day_bytes, data_dir):>10,.0f} ms   "
        f"{filesystem_of(data_dir)}"
    )


if __name__ == "__main__":
    main()
