"""Fault drill: minutes of random kills of every kind against real pools under load.

Run: .venv/bin/python -m bench.fault_drill [--seconds 240] [--rate 40] [--every 3] [--seed 1] [--backlog 0]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set; database restarts need the
embedded server, with DATABASE_URL set they become cuts of every session instead).

Two pool processes of the crawl pool (as two hosts would run them) and two control processes run
while a feeder submits synthetic jobs with a ledger effect. Every ``--every`` seconds one fault
strikes, drawn at random: kill -9 of an idle worker, a busy worker, every worker of a pool, the
pusher, the monitor, the supervisor, the pool's main process (started again a second later), one
of the control processes (likewise; half the time the leader), SIGSTOP of a busy worker past its
lease + grace, or an immediate PostgreSQL restart (a submission whose answer it cuts off is sent
again with the same idempotency key, as a client would). Afterwards every job must end, and the drill
prints: jobs lost, effects duplicated, results that disagree with their effect, stale writes
refused, the longest time the pools completed nothing while jobs were due, and per fault kind the
delay from the fault to the next start of each job the victim held. ``--backlog N`` submits N jobs
of the same kind before the first fault, so the victims' jobs come back behind a line of work: the
next start shows whether a job keeps its place in line (issue 39: within its backoff and a batch).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

import psutil  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import DatabaseError, connection, connections  # noqa: E402

from devtools import faults  # noqa: E402
from devtools.faults import Fault  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "var" / "fault-drill"
LEASE, GRACE = 4.0, 1.0
TIMING = {
    "LEITSTAND_SYNTHETIC_LEASE_SECONDS": str(LEASE),
    "LEITSTAND_SYNTHETIC_HEARTBEAT_SECONDS": "1",
    "LEITSTAND_SYNTHETIC_TIMEOUT_SECONDS": "3",
    "LEITSTAND_SYNTHETIC_MAX_ATTEMPTS": "10",
    "LEITSTAND_LEASE_GRACE_SECONDS": str(int(GRACE)),
    "LEITSTAND_CONTROL_INTERVAL_SECONDS": "0.2",
    "LEITSTAND_QUEUE_POLL_SECONDS": "0.05",
    "LEITSTAND_POOL_STALL_SECONDS": "2",
    "LEITSTAND_POOL_SHUTDOWN_SECONDS": "10",
    "LEITSTAND_NOTIFY_TIMEOUT_SECONDS": "8",
    "LEITSTAND_NOTIFY_HTTP_TIMEOUT_SECONDS": "4",
    "LEITSTAND_PIPELINE_TIMEOUT_SECONDS": "8",
    "LEITSTAND_PIPELINE_LEASE_SECONDS": "12",
    "LEITSTAND_PIPELINE_HEARTBEAT_SECONDS": "1",
    "LEITSTAND_FETCH_TOTAL_SECONDS": "4",
    "LEITSTAND_CRAWL_WORKERS": "3",
    "LEITSTAND_WAKEUP_TIMEOUT_SECONDS": "30",
}


def database_seconds() -> float:
    """Database time as a Unix timestamp, from a fresh connection (the drill's own may be cut)."""
    for _ in range(100):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
                return float(cursor.fetchone()[0])
        except DatabaseError:
            connection.close()
            time.sleep(0.1)
    raise RuntimeError("the database did not come back")


class Processes:
    def __init__(self) -> None:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            **TIMING,
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "PYTHONPATH": str(ROOT),
            "LEITSTAND_RUN_DIR": str(RUN_DIR),
        }
        self.running: dict[str, tuple[str, subprocess.Popen]] = {}

    def start(self, key: str, command: str) -> None:
        log = open(RUN_DIR / f"{key}.log", "ab")
        self.running[key] = (
            command,
            subprocess.Popen(
                [sys.executable, "manage.py", "runpool", command],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            ),
        )

    def restart_dead(self) -> None:
        for key, (command, process) in list(self.running.items()):
            if process.poll() is not None:
                self.start(key, command)

    def stop_all(self) -> None:
        for _, process in self.running.values():
            process.send_signal(signal.SIGTERM)
        for _, process in self.running.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

    def pool_tree(self, key: str) -> dict | None:
        """The supervisor, workers, pusher and monitor of one pool process, told apart by their titles."""
        try:
            (supervisor,) = psutil.Process(self.running[key][1].pid).children()
            tree = {"main": self.running[key][1].pid, "supervisor": supervisor.pid, "workers": [], "idle": []}
            for child in supervisor.children():
                role = " ".join(child.cmdline()).split()[-1]  # setproctitle may leave empty slots behind
                if role in ("pusher", "monitor"):
                    tree[role] = child.pid
                else:
                    tree["workers"].append(child.pid)
                    if role == "idle":
                        tree["idle"].append(child.pid)
            return tree
        except (ValueError, psutil.Error):
            return None


def held_by(pids: list[int]) -> list[tuple[str, int]]:
    if not pids:
        return []
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT job_id::text, lease_version FROM jobs_attempt WHERE finished_at IS NULL "
                "AND started_at IS NOT NULL AND worker_pid = ANY(%s)",
                [pids],
            )
            return cursor.fetchall()
    except DatabaseError:
        connection.close()
        return []


class Drill:
    def __init__(self, args) -> None:
        self.args = args
        self.random = random.Random(args.seed)
        self.processes = Processes()
        self.correlation = f"fault-drill-{uuid.uuid4().hex[:8]}"
        self.submitted = 0
        self.resubmitted = 0  # submissions sent again after their answer was lost
        self.faults: list[Fault] = []
        self.stop = threading.Event()
        self.longest_stall = (0.0, "")
        self.pgdata = getattr(sys.modules.get("config.test_settings"), "_server", None)

    # --- load and watch ----------------------------------------------------------------------

    def feed(self) -> None:
        from workers.runtime.services import job_submit

        interval = 1 / self.args.rate
        while not self.stop.is_set():
            payload = {"pool": "crawl", "duration_ms": self.random.randint(0, 400), "effect": True}
            key, sent_again = f"drill-{uuid.uuid4().hex}", False
            # A submission whose answer was lost (the database restarted around its commit) may or may
            # not be stored: like any client, the feeder sends it again with the same key until it is
            # answered, and the key makes it one job either way.
            while True:
                try:
                    job_submit(
                        job_type="synthetic",
                        payload=payload,
                        idempotency_key=key,
                        actor="fault-drill",
                        correlation_id=self.correlation,
                    )
                    break
                except DatabaseError:
                    connections["default"].close()
                    sent_again = True
                    time.sleep(0.1)
            self.submitted += 1
            self.resubmitted += sent_again
            self.stop.wait(interval)
        connections["default"].close()

    def backlog_submit(self, jobs: int) -> None:
        """A line of ``jobs`` jobs like the feeder's, due now, submitted at once."""
        from workers.runtime.services import jobs_submit_many

        for first in range(0, jobs, 1000):
            batch = [
                {
                    "job_type": "synthetic",
                    "payload": {"pool": "crawl", "duration_ms": self.random.randint(0, 400), "effect": True},
                    "idempotency_key": f"drill-backlog-{uuid.uuid4().hex}",
                }
                for _ in range(min(1000, jobs - first))
            ]
            jobs_submit_many(batch, actor="fault-drill", correlation_id=self.correlation)
        self.submitted += jobs
        connection.close()

    def watch(self) -> None:
        """Sample every 0.25 s; the longest time in which nothing completed while jobs were due."""
        last_progress, last_done, last_fault = time.monotonic(), -1, ""
        while not self.stop.is_set():
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*) FILTER (WHERE state = 'planned' AND due_at <= leitstand_now()), "
                        "count(*) FILTER (WHERE state IN ('result_stored', 'dead')) FROM jobs_job"
                    )
                    due, done = cursor.fetchone()
            except DatabaseError:
                connection.close()
                self.stop.wait(0.25)
                continue
            now = time.monotonic()
            if done != last_done or due == 0:
                last_progress, last_done = now, done
                last_fault = self.faults[-1].kind if self.faults else ""
            elif now - last_progress > self.longest_stall[0]:
                self.longest_stall = (now - last_progress, last_fault or "none")
            self.stop.wait(0.25)
        connection.close()

    # --- faults ------------------------------------------------------------------------------

    def strike(self, kind: str) -> Fault | None:
        pool_key = self.random.choice(["crawl-a", "crawl-b"])
        tree = self.processes.pool_tree(pool_key)
        if tree is None and kind not in (faults.CONTROL, faults.DATABASE_RESTART):
            return None
        at = database_seconds()
        if kind == faults.IDLE_WORKER:
            if not tree["idle"]:
                return None
            os.kill(self.random.choice(tree["idle"]), signal.SIGKILL)
            return Fault(kind, at)
        if kind in (faults.BUSY_WORKER, faults.FROZEN_WORKER):
            busy = [pid for pid in tree["workers"] if held_by([pid])]
            if not busy:
                return None
            victim = self.random.choice(busy)
            fault = Fault(kind, at, held_by([victim]))
            if kind == faults.BUSY_WORKER:
                os.kill(victim, signal.SIGKILL)
            else:
                os.kill(victim, signal.SIGSTOP)
                threading.Timer(LEASE + GRACE + 2, lambda: _signal(victim, signal.SIGCONT)).start()
            return fault
        if kind in (faults.EVERY_WORKER, faults.SUPERVISOR, faults.POOL_MAIN):
            fault = Fault(kind, at, held_by(tree["workers"]))
            targets = {
                faults.EVERY_WORKER: tree["workers"],
                faults.SUPERVISOR: [tree["supervisor"]],
                faults.POOL_MAIN: [tree["main"]],
            }[kind]
            for pid in targets:
                _signal(pid, signal.SIGKILL)
            if kind == faults.POOL_MAIN:
                time.sleep(1)
                self.processes.restart_dead()
            return fault
        if kind in (faults.PUSHER, faults.MONITOR):
            os.kill(tree[kind], signal.SIGKILL)
            return Fault(kind, at)
        if kind == faults.CONTROL:
            # One of the two leads (its session holds the leader lock), the other waits to take over.
            os.kill(
                self.random.choice([p.pid for c, p in self.processes.running.values() if c == "control"]),
                signal.SIGKILL,
            )
            time.sleep(1)
            self.processes.restart_dead()
            return Fault(kind, at)
        if self.pgdata is not None:
            from devtools import embedded_db

            embedded_db.restart(self.pgdata.pgdata, mode="immediate")
        else:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        connection.close()
        return Fault(kind, at)

    # --- the run -----------------------------------------------------------------------------

    def run(self) -> dict:
        for key, command in (
            ("control-a", "control"),
            ("control-b", "control"),
            ("crawl-a", "crawl"),
            ("crawl-b", "crawl"),
        ):
            self.processes.start(key, command)
        time.sleep(4)
        if self.args.backlog:
            self.backlog_submit(self.args.backlog)
        threads = [threading.Thread(target=self.feed), threading.Thread(target=self.watch)]
        for thread in threads:
            thread.start()
        until = time.monotonic() + self.args.seconds
        try:
            while time.monotonic() < until:
                time.sleep(self.args.every)
                fault = self.strike(self.random.choice(faults.PROCESS_FAULTS))
                if fault is not None:
                    self.faults.append(fault)
                    print(f"  {time.strftime('%H:%M:%S')} {fault.kind} ({len(fault.held)} jobs held)", flush=True)
                self.processes.restart_dead()
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()
        settled = self._settle()
        self.processes.stop_all()
        return settled

    def _verdict(self) -> faults.Verdict:
        def query(statement, parameters):
            with connection.cursor() as cursor:
                cursor.execute(statement, parameters)
                return cursor.fetchall()

        return faults.verdict(query, correlations=[self.correlation], submitted=self.submitted)

    def _settle(self, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._verdict().still_open:
            self.processes.restart_dead()
            time.sleep(1)
        return self._report()

    def _report(self) -> dict:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT completion_reason, count(*) FROM jobs_job WHERE correlation_id = %s "
                "AND state = 'dead' GROUP BY 1",
                [self.correlation],
            )
            dead = cursor.fetchall()
        delays = defaultdict(list)
        for fault in self.faults:
            for job_id, version in fault.held:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT extract(epoch FROM started_at) FROM jobs_attempt WHERE job_id = %s "
                        "AND lease_version = %s AND started_at IS NOT NULL",
                        [job_id, version + 1],
                    )
                    row = cursor.fetchone()
                if row:
                    delays[fault.kind].append(float(row[0]) - fault.at)
        return {
            "verdict": self._verdict(),
            "resubmitted": self.resubmitted,
            "dead": dead,
            "delays": delays,
            "faults": [f.kind for f in self.faults],
            "longest_stall": self.longest_stall,
        }


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--rate", type=float, default=40, help="jobs submitted per second")
    parser.add_argument("--every", type=float, default=3, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backlog", type=int, default=0, help="jobs submitted at once before the first fault")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    started = time.monotonic()
    report = Drill(args).run()
    verdict = report["verdict"]
    counts = {kind: report["faults"].count(kind) for kind in faults.PROCESS_FAULTS}
    print(
        f"\nfault drill: {args.seconds:g} s, {len(report['faults'])} faults, {verdict.submitted:,} jobs "
        f"({args.backlog:,} of them a backlog at the start; {time.monotonic() - started:.0f} s in all)"
    )
    print(f"jobs lost                          {verdict.lost}")
    print(f"submissions sent again             {report['resubmitted']} (their answer lost in a restart; same key)")
    print(f"jobs dead                          {sum(n for _, n in report['dead'])} {report['dead'] or ''}")
    print(f"effects missing                    {verdict.effects_missing}")
    print(f"effects applied more than once     {verdict.effects_duplicated}")
    print(f"results disagreeing with effect    {verdict.effects_misreported}")
    print(f"stale writes refused               {verdict.stale_writes_refused}")
    seconds, after = report["longest_stall"]
    print(f"longest no progress while due      {seconds:.1f} s (after: {after}; lease + grace = {LEASE + GRACE:g} s)")
    print(f"\n{'fault':<26} {'times':>5} {'jobs held':>9} {'next start p50':>15} {'max':>7}")
    for kind in faults.PROCESS_FAULTS:
        delays = report["delays"].get(kind, [])
        p50 = f"{statistics.median(delays):.2f} s" if delays else "—"
        worst = f"{max(delays):.2f} s" if delays else "—"
        print(f"{kind:<26} {counts[kind]:>5} {len(delays):>9} {p50:>15} {worst:>7}")


if __name__ == "__main__":
    main()
