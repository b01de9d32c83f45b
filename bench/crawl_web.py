"""The crawl at the politeness limit: many slow hosts, each crawled as fast as its politeness allows.

Run: .venv/bin/python -m bench.crawl_web [--hosts 100] [--pages 20] [--latency-ms 100] [--delay 0.5]
[--workers N] [--skip-bare] [--timeout 600] [--port 8200] [--statements]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set). ``--statements`` logs every
statement of Leitstand's run and prints, per page, each statement's count, time, p50 and p99
(``bench/statement_log.py``; the embedded server only; a statement's time under load includes its
wait for a core, so the count is the figure to trust, and an ``EXPLAIN ANALYZE`` the cost).

The web is simulated by a process of its own (``bench/simweb.py``, asyncio; its CPU is not
Leitstand's): ``--hosts`` loopback hosts (127.0.1.1, 127.0.1.2, …; 250 to a /24, then 127.0.2.x …) on
one port, each with a robots.txt (``Disallow: /private/``) and ``--pages`` HTML pages in a binary tree
of links from ``/p/0`` (plus a link to ``/private/x``, which robots.txt forbids, and two images each,
not fetched: the analysis pool is not run), every answer ``--latency-ms`` late. The server records
every request (host, path, arrival, end of the answer), and politeness is judged there, where the
requests arrive: per host, an **overlap** is a request arriving while another one to the host is
still being answered, a **short gap** a start-to-start time below ``--delay`` less 10 ms (robots.txt
counts as a request like any other); violations are both together. Also the time from each host's
robots.txt to its first page, and the fetches in flight at the server (time-averaged and peak).

Leitstand: a real control process and a real crawl pool (``runpool``, the pool's default worker count
unless ``--workers`` is given), ``LEITSTAND_HOST_MIN_DELAY_SECONDS=--delay``, one source per host
(scope: the host, depth: the tree's), one crawl run started with the pools up and idle. Measured:
pages per second between the first and the last completed crawl job (the database polled every
100 ms, as ``bench.throughput`` does); the CPU seconds the crawl pool's process tree, the control
process's tree and PostgreSQL's processes (the postmaster and its backends; the bench's own polling
backend left out) used in that window, per page (a tree's CPU is its live processes' own plus what
their ended, reaped children used, sampled every 0.2 s and at the window's ends); the peak RSS of
the pool's and the control's trees (summed over their processes); claims per page (``jobs_attempt``
rows of the run's crawl jobs per crawl job: a deferred, released attempt for a busy host is what makes
it more than 1) and the jobs that ended dead or failed.

The **physical bound**: a host takes at most one request per ``max(delay, latency)`` when the delay is
counted start to start, one per ``delay + latency`` when it is counted from the end of the answer
before; ``hosts`` divided by that is the most pages per second any polite crawler can reach. The
**baseline** in the same run, before Leitstand's: that bound, and a bare polite crawler in this
process over a second, identical simulated web (a fresh server, so its records are its own):
asyncio and ``httpx.AsyncClient``, one request in flight per host, ``--delay`` start to start, robots.txt
first through the same per-host slot, links parsed with ``workers.pipeline.extraction.extract``; its pages
per second, fraction of the bound, CPU per page (this process) and violations beside Leitstand's.
"""

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import psutil
from django.conf import settings
from django.db import connection

from bench import statement_log
from bench.simweb import host_addresses, tree_depth
from bench.throughput import ROOT, database_costs, per_job, pool_env  # sets Django up
from config import test_settings
from jobs.models import Batch, database_now
from workers.pipeline.extraction import extract
from workers.pipeline.models import HostState, RobotsFile, Source, url_in_scope
from workers.pipeline.robots import USER_AGENT_TOKEN
from workers.pipeline.robotstxt import RobotsRules
from workers.pipeline.services import crawl_start, source_upsert
from workers.runtime.models import WorkerProcess

TOLERANCE = 0.010  # a start-to-start gap this much below the delay is not yet a violation
POLL_SECONDS = 0.1
SAMPLE_SECONDS = 0.2
SHOWN_VIOLATIONS = 20
TERMINAL = ("done", "dead", "cancelled")


# --- the simulated web, a process of its own ---------------------------------------------------


class SimWebProcess:
    """``bench.simweb`` as a child process: started ready, stopped with its request records."""

    def __init__(self, *, hosts: int, pages: int, latency_ms: float, port: int, max_seconds: float) -> None:
        self.addresses = host_addresses(hosts)
        self.port = port
        self.targets = [f"{address}:{port}" for address in self.addresses]
        handle, name = tempfile.mkstemp(prefix="crawl-web-records-", suffix=".json")
        os.close(handle)
        self.records_path = Path(name)
        self.log = tempfile.TemporaryFile()
        self.command = [
            sys.executable,
            "-m",
            "bench.simweb",
            f"--hosts={hosts}",
            f"--pages={pages}",
            f"--latency-ms={latency_ms}",
            f"--port={port}",
            f"--records={self.records_path}",
            f"--max-seconds={max_seconds}",
        ]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "SimWebProcess":
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        line = self.process.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self._kill()
            self.records_path.unlink(missing_ok=True)
            self.log.seek(0)
            raise RuntimeError(f"the simulated web did not start: {self.log.read().decode(errors='replace')[-2000:]}")
        return self

    def stop(self) -> list[list]:
        """Stop the server and return its records: [host, path, arrival, end] per request."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._kill()
            raise RuntimeError("the simulated web did not stop within 30 s") from None
        return json.loads(self.records_path.read_text() or "[]")

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def __exit__(self, *exc) -> None:
        self._kill()
        if self.process is not None:
            self.process.stdout.close()
        self.log.close()
        self.records_path.unlink(missing_ok=True)


# --- politeness, judged from the server's records -------------------------------------------------


@dataclass
class Politeness:
    requests: int
    overlaps: list[tuple]  # (host, earlier path, later path, seconds the later one came too early)
    short_gaps: list[tuple]  # (host, earlier path, later path, start-to-start seconds)
    robots_to_page: list[float]  # per host: robots.txt's arrival to the first page's arrival
    robots_end_to_page: list[float]  # per host: robots.txt's answer ended to the first page's arrival
    in_flight_mean: float
    in_flight_peak: int
    first_arrival: float
    last_end: float
    gaps: list[float] = field(default_factory=list)  # start to start, between consecutive requests to a host

    @property
    def violations(self) -> int:
        return len(self.overlaps) + len(self.short_gaps)


def politeness(records: list[list], delay: float) -> Politeness:
    by_host = defaultdict(list)
    for host, path, arrival, end in records:
        by_host[host].append((arrival, end, path))
    overlaps, short_gaps, robots_to_page, robots_end_to_page, gaps = [], [], [], [], []
    for host, requests in sorted(by_host.items()):
        requests.sort()
        busy_until, busy_path = float("-inf"), ""
        for arrival, end, path in requests:
            if arrival < busy_until:
                overlaps.append((host, busy_path, path, busy_until - arrival))
            if end > busy_until:
                busy_until, busy_path = end, path
        for (arrival, _, path), (later, _, later_path) in zip(requests, requests[1:]):
            gaps.append(later - arrival)
            if later - arrival < delay - TOLERANCE:
                short_gaps.append((host, path, later_path, later - arrival))
        robots = [r for r in requests if r[2] == "/robots.txt"]
        pages = [r for r in requests if r[2].startswith("/p/")]
        if robots and pages:
            robots_to_page.append(pages[0][0] - robots[0][0])
            robots_end_to_page.append(pages[0][0] - robots[0][1])
    events = sorted([(r[2], 1) for r in records] + [(r[3], -1) for r in records])
    in_flight = peak = 0
    area, previous = 0.0, events[0][0] if events else 0.0
    for moment, change in events:
        area += in_flight * (moment - previous)
        in_flight += change
        peak = max(peak, in_flight)
        previous = moment
    first = min((r[2] for r in records), default=0.0)
    last = max((r[3] for r in records), default=0.0)
    return Politeness(
        requests=len(records),
        overlaps=overlaps,
        short_gaps=short_gaps,
        robots_to_page=robots_to_page,
        robots_end_to_page=robots_end_to_page,
        in_flight_mean=area / (last - first) if last > first else 0.0,
        in_flight_peak=peak,
        first_arrival=first,
        last_end=last,
        gaps=sorted(gaps),
    )


def kind(path: str) -> str:
    return "robots.txt" if path == "/robots.txt" else "page" if path.startswith("/p/") else path


# --- process trees: CPU and memory ------------------------------------------------------------


@dataclass
class Sample:
    at: float
    cpu: float  # seconds: the live processes' user+system, and what their reaped children used
    rss: int  # bytes, summed over the live processes
    pss: int = 0  # bytes, summed: each page shared between processes (forked) counted once in all
    own: dict = field(default_factory=dict)  # pid → its own user+system seconds
    pids: frozenset = frozenset()


class Tree:
    """A process and its descendants, by psutil. A child that ended and was reaped by its parent in the
    tree keeps counting in the parent's ``children_user``/``children_system``, so nothing is lost."""

    def __init__(self, root_pid: int | None, *, descendants: bool = True, pss: bool = True) -> None:
        self.root = psutil.Process(root_pid) if root_pid else None
        self.descendants = descendants
        self.pss = pss  # reading PSS (smaps) costs the bench's CPU: only for the trees whose memory is reported
        self.seen: set[int] = set()

    def sample(self) -> Sample:
        if self.root is None:
            return Sample(time.monotonic(), 0.0, 0, 0)
        try:
            members = [self.root, *(self.root.children(recursive=True) if self.descendants else [])]
        except psutil.Error:
            members = []
        cpu, rss, pss, own = 0.0, 0, 0, {}
        for process in members:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    memory = process.memory_full_info() if self.pss else process.memory_info()
            except psutil.Error:
                continue
            own[process.pid] = times.user + times.system
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += memory.rss
            pss += getattr(memory, "pss", memory.rss)
        self.seen.update(own)
        return Sample(time.monotonic(), cpu, rss, pss, own, frozenset(own))


class Monitor:
    """Samples the trees every 0.2 s (peak RSS; processes seen) and on demand (the window's ends)."""

    def __init__(self, trees: dict[str, Tree]) -> None:
        self.trees = trees
        self.peak_rss: Counter = Counter()
        self.peak_pss: Counter = Counter()
        self.peak_processes: Counter = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="crawl-web-monitor", daemon=True)

    def snapshot(self) -> dict[str, Sample]:
        samples = {name: tree.sample() for name, tree in self.trees.items()}
        with self._lock:
            for name, sample in samples.items():
                self.peak_rss[name] = max(self.peak_rss[name], sample.rss)
                self.peak_pss[name] = max(self.peak_pss[name], sample.pss)
                self.peak_processes[name] = max(self.peak_processes[name], len(sample.pids))
        return samples

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.snapshot()

    def __enter__(self) -> "Monitor":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def postmaster_pid() -> int | None:
    """The PostgreSQL server's postmaster: the throwaway embedded server's, else the one whose
    ``postmaster.pid`` sits in DATABASE_URL's socket directory, else the only postmaster running."""
    from config import test_settings

    server = getattr(test_settings, "_server", None)
    if server is not None and server.pid:
        return server.pid
    host = unquote(urlsplit(os.environ["DATABASE_URL"]).netloc.rpartition("@")[2])
    if host.startswith("/"):
        for folder in (Path(host.rpartition(":")[0] if ":" in host else host), Path(host)):
            pidfile = folder / "postmaster.pid"
            if pidfile.exists():
                return int(pidfile.read_text().split()[0])
    roots = []
    for process in psutil.process_iter(["name", "ppid"]):
        try:
            if process.info["name"] in ("postgres", "postmaster"):
                parent = psutil.Process(process.info["ppid"])
                if parent.name() not in ("postgres", "postmaster"):
                    roots.append(process.pid)
        except psutil.Error:
            continue
    return roots[0] if len(roots) == 1 else None


# --- Leitstand's side -----------------------------------------------------------------------------


def start_process(name: str, workers: int | None, log, **extra: str) -> subprocess.Popen:
    """``runpool NAME`` as ``bench.throughput.start`` starts it, but the crawl pool's worker count is the
    pool's own setting unless ``workers`` is given (``pool_env`` always sets one)."""
    env = pool_env(workers or 1, **extra)
    if workers is None:
        env.pop("LEITSTAND_CRAWL_WORKERS")
        if "LEITSTAND_CRAWL_WORKERS" in os.environ:
            env["LEITSTAND_CRAWL_WORKERS"] = os.environ["LEITSTAND_CRAWL_WORKERS"]
    return subprocess.Popen(
        [sys.executable, "manage.py", "runpool", name], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log
    )


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        process.wait(timeout=10)


def wait_idle(pool: subprocess.Popen, workers: int, *, at_least: float = 5.0, at_most: float = 60.0) -> float:
    """Until the crawl pool's workers are in the registry (and at least ``at_least`` seconds passed)."""
    started = time.monotonic()
    while time.monotonic() - started < at_most:
        if pool.poll() is not None:
            raise RuntimeError(f"the crawl pool exited at start ({pool.returncode})")
        pids = [p.pid for p in psutil.Process(pool.pid).children(recursive=True)]
        live = WorkerProcess.objects.filter(pool="crawl", pid__in=pids, stopped_at__isnull=True).count()
        if live >= workers and time.monotonic() - started >= at_least:
            break
        time.sleep(0.2)
    return time.monotonic() - started


POLL_SQL = """
SELECT count(*) FILTER (WHERE state = ANY(%(terminal)s)),
       count(*) FILTER (WHERE state = 'done' AND completion_reason LIKE 'page crawled%%'),
       count(*),
       pg_backend_pid()
FROM jobs_job WHERE batch_id = %(batch)s AND type = 'crawl'
"""


@dataclass
class Polled:
    at: float
    terminal: int
    pages: int
    total: int
    samples: dict


def leitstand(args: argparse.Namespace, workers: int, logs: Path) -> dict:
    depth = tree_depth(args.pages)
    web = SimWebProcess(
        hosts=args.hosts, pages=args.pages, latency_ms=args.latency_ms, port=args.port, max_seconds=args.timeout + 600
    )
    with web:
        # A database used before (DATABASE_URL) may know these hosts: their robots.txt and politeness
        # state are forgotten, so this run starts as the first crawl of a new web.
        RobotsFile.objects.filter(origin__in=[f"http://{target}" for target in web.targets]).delete()
        HostState.objects.filter(host__in=web.targets).delete()
        tag = uuid.uuid4().hex[:8]
        sources = [
            source_upsert(
                name=f"crawl-web {tag} {target}",
                base_url=f"http://{target}/p/0",
                scope=f"http://{target}/",
                max_depth=depth,
                max_links_per_page=10,
                max_images_per_page=10,
            )
            for target in web.targets
        ]
        # Their schedules' current slots count as taken: only this benchmark's run crawls them.
        Source.objects.filter(pk__in=[s.pk for s in sources]).update(last_slot_at=database_now())
        env = {
            "LEITSTAND_HTTP_ALLOWED_TARGETS": ",".join(web.targets),
            "LEITSTAND_HOST_MIN_DELAY_SECONDS": str(args.delay),
        }
        with open(logs / "control.log", "wb") as control_log, open(logs / "crawl.log", "wb") as crawl_log:
            control = start_process("control", args.workers, control_log, **env)
            pool = start_process("crawl", args.workers, crawl_log, **env)
            try:
                ready_after = wait_idle(pool, workers)
                postmaster = postmaster_pid()
                trees = {
                    "crawl pool": Tree(pool.pid),
                    "control": Tree(control.pid),
                    "PostgreSQL": Tree(postmaster, pss=False),
                    "simulated web": Tree(web.process.pid, descendants=False, pss=False),
                }
                load = os.getloadavg()
                with Monitor(trees) as monitor:
                    monitor.snapshot()
                    monitor.peak_rss.clear()  # the peaks of the run, not of the start
                    monitor.peak_pss.clear()
                    run = f"crawl-web-{tag}"
                    costs_before = database_costs()
                    statements = _statements_on() if args.statements else None
                    started = time.monotonic()
                    crawl_start(actor="bench", sources=sources, run=run)
                    batch = Batch.objects.get(key=f"crawl-run:{run}")
                    polls, own_backends = poll_run(batch.pk, monitor, started + args.timeout)
                    if statements is not None:
                        statement_log.off(statements[0])
                    costs_after = database_costs()
                    peak_rss = dict(monitor.peak_rss)
                    peak_pss = dict(monitor.peak_pss)
                    peak_processes = dict(monitor.peak_processes)
            finally:
                stop_process(pool)
                stop_process(control)
        records = web.stop()
    return {
        "batch": batch.pk,
        "started": started,
        "polls": polls,
        "own_backends": own_backends,
        "peak_rss": peak_rss,
        "peak_pss": peak_pss,
        "costs": (costs_before, costs_after),
        "peak_processes": peak_processes,
        "seen": {name: len(tree.seen) for name, tree in trees.items()},
        "records": records,
        "ready_after": ready_after,
        "load": load,
        "postmaster": postmaster,
        "finished": polls[-1].total > 0 and polls[-1].terminal == polls[-1].total,
        "statements": statements,
    }


def _statements_on() -> tuple:
    """Every statement of the run logged by the embedded server (``--statements``): the server and
    where in its log the run begins."""
    server = test_settings._server
    log = statement_log.on(server)
    return server, log, log.stat().st_size


def poll_run(batch: int, monitor: Monitor, deadline: float) -> tuple[list[Polled], set[int]]:
    """Poll the run's crawl jobs until all have ended (or the deadline); a snapshot of the trees at
    every poll that saw a change. Returns the polls that saw a change, and the bench's own backends."""
    polls: list[Polled] = []
    own_backends: set[int] = set()
    seen = None
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(POLL_SQL, {"terminal": list(TERMINAL), "batch": batch})
            terminal, pages, total, backend = cursor.fetchone()
        own_backends.add(backend)
        if (terminal, pages, total) != seen:
            seen = terminal, pages, total
            polls.append(Polled(time.monotonic(), terminal, pages, total, monitor.snapshot()))
            if total and terminal == total:
                break
        time.sleep(POLL_SECONDS)
    return polls, own_backends


def run_report(result: dict, args: argparse.Namespace) -> dict:
    polls = result["polls"]
    first = next((p for p in polls if p.pages > 0), None)
    last = polls[-1] if polls else None  # the last crawl job's end (or, unfinished, the last change seen)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, count(*), count(*) FILTER (WHERE completion_reason LIKE 'page crawled%%') "
            "FROM jobs_job WHERE batch_id = %s AND type = 'crawl' GROUP BY state",
            [result["batch"]],
        )
        states = {state: (jobs, pages) for state, jobs, pages in cursor.fetchall()}
        cursor.execute(
            "SELECT a.outcome, a.error_class, count(*) FROM jobs_attempt AS a JOIN jobs_job AS j ON j.id = a.job_id "
            "WHERE j.batch_id = %s AND j.type = 'crawl' GROUP BY 1, 2 ORDER BY 3 DESC",
            [result["batch"]],
        )
        attempts = cursor.fetchall()
        # How long a page holds its host's key in the claim (claimed → ended): with one job in flight
        # per host, a page of a host is claimed only after the one before it ended.
        cursor.execute(
            "SELECT percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM a.finished_at - a.claimed_at)) "
            "FROM jobs_attempt AS a JOIN jobs_job AS j ON j.id = a.job_id "
            "WHERE j.batch_id = %s AND j.type = 'crawl' AND a.finished_at IS NOT NULL",
            [result["batch"]],
        )
        held = cursor.fetchone()[0] or [0, 0, 0]
        # How long a host's next page waited after the page before it ended (its key free again, its
        # rest not yet over, or not claimed yet).
        cursor.execute(
            "SELECT percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY gap) FROM ("
            " SELECT extract(epoch FROM a.claimed_at - lag(a.finished_at) OVER (PARTITION BY j.flow_key ORDER BY a.claimed_at)) AS gap"
            " FROM jobs_attempt AS a JOIN jobs_job AS j ON j.id = a.job_id WHERE j.batch_id = %s AND j.type = 'crawl') AS g "
            "WHERE gap IS NOT NULL",
            [result["batch"]],
        )
        waited = cursor.fetchone()[0] or [0, 0, 0]
    jobs = sum(n for n, _ in states.values())
    pages = sum(p for _, p in states.values())
    report = {
        "pages": pages,
        "skipped": states.get("done", (0, 0))[0] - states.get("done", (0, 0))[1],
        "jobs": jobs,
        "states": {state: n for state, (n, _) in states.items()},
        "attempts": attempts,
        "held": held,
        "waited": waited,
        "seconds": None,
        "rate": None,
        "cpu": {},
        "window_pages": 0,
        "run_seconds": (last.at - result["started"]) if last else None,
    }
    if first is None or last is first:
        return report
    window = last.at - first.at
    report.update(seconds=window, rate=(last.pages - first.pages) / window, window_pages=last.pages - first.pages)
    for name in ("crawl pool", "control", "PostgreSQL", "simulated web"):
        before, after = first.samples[name], last.samples[name]
        used = after.cpu - before.cpu
        if name == "PostgreSQL":  # the bench's own polling backend is not Leitstand's work
            used -= sum(after.own.get(pid, 0.0) - before.own.get(pid, 0.0) for pid in result["own_backends"])
        report["cpu"][name] = used
    report["cpu"]["total"] = sum(report["cpu"][n] for n in ("crawl pool", "control", "PostgreSQL"))
    return report


# --- the bare polite crawler ----------------------------------------------------------------------


async def bare_crawl(addresses: list[str], port: int, pages: int, delay: float, timeout: float) -> dict:
    """One task per host: robots.txt, then its pages breadth first, one request at a time, ``delay``
    from the start of one request (its head sent) to the start of the next."""
    depth_limit = tree_depth(pages)
    done: list[tuple[float, float]] = []  # (monotonic, process_time) as each page has been parsed
    counts: Counter = Counter()
    limits = httpx.Limits(max_connections=len(addresses) + 10, max_keepalive_connections=len(addresses) + 10)
    async with httpx.AsyncClient(timeout=10, limits=limits, trust_env=False) as client:

        async def crawl_host(address: str) -> None:
            origin = f"http://{address}:{port}"
            next_start = 0.0

            async def polite_get(url: str) -> httpx.Response:
                # The next request to the host waits ``delay`` from when this one's head was written
                # to the socket (a new connection's set-up does not count as spacing).
                nonlocal next_start
                wait = next_start - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                sent = [time.monotonic()]

                async def trace(event: str, info: dict) -> None:
                    if event == "http11.send_request_headers.started":
                        sent.append(time.monotonic())

                try:
                    return await client.get(url, extensions={"trace": trace})
                finally:
                    next_start = sent[-1] + delay

            robots = await polite_get(f"{origin}/robots.txt")
            rules = RobotsRules.parse(robots.content if robots.status_code == 200 else b"")
            start = f"{origin}/p/0"
            frontier, seen = deque([(start, 0)]), {start}
            while frontier:
                url, depth = frontier.popleft()
                if not rules.is_allowed(urlsplit(url).path, USER_AGENT_TOKEN):
                    counts["skipped"] += 1
                    continue
                response = await polite_get(url)
                if response.status_code != 200:
                    counts[f"status {response.status_code}"] += 1
                    continue
                found = extract(response.content, base_url=str(response.url))
                done.append((time.monotonic(), time.process_time()))
                if depth < depth_limit:
                    for link in found.links:
                        if link not in seen and url_in_scope(link, f"{origin}/"):
                            seen.add(link)
                            frontier.append((link, depth + 1))

        await asyncio.wait_for(asyncio.gather(*(crawl_host(address) for address in addresses)), timeout)
    done.sort()
    return {"done": done, "counts": counts}


def bare(args: argparse.Namespace) -> dict:
    web = SimWebProcess(
        hosts=args.hosts, pages=args.pages, latency_ms=args.latency_ms, port=args.port, max_seconds=args.timeout + 600
    )
    with web:
        server = Tree(web.process.pid, descendants=False)
        before = server.sample()
        result = asyncio.run(bare_crawl(web.addresses, web.port, args.pages, args.delay, args.timeout))
        after = server.sample()
        records = web.stop()
    done = result["done"]
    report = {
        "pages": len(done),
        "skipped": result["counts"]["skipped"],
        "counts": result["counts"],
        "records": records,
    }
    if len(done) > 1:
        (t0, cpu0), (t1, cpu1) = done[0], done[-1]
        report.update(seconds=t1 - t0, rate=(len(done) - 1) / (t1 - t0), cpu=cpu1 - cpu0, window_pages=len(done) - 1)
    report["server_cpu"] = after.cpu - before.cpu  # over its whole crawl
    return report


# --- the report -----------------------------------------------------------------------------------


def ms(values: list[float], how) -> str:
    return f"{how(values) * 1000:.0f}" if values else "—"


def ratio(ours, theirs) -> str:
    if ours is None or theirs is None:
        return "—"
    if theirs == 0:
        return "—" if ours == 0 else "∞"
    return f"{ours / theirs:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--delay", type=float, default=0.5, help="LEITSTAND_HOST_MIN_DELAY_SECONDS")
    parser.add_argument("--workers", type=int, default=None, help="crawl workers (default: the pool's own setting)")
    parser.add_argument("--skip-bare", action="store_true", help="no bare polite crawler baseline")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a crawl may take at most")
    parser.add_argument("--port", type=int, default=8200, help="the simulated web's port")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="log every statement of Leitstand's run and print where the database time goes per page "
        "(the embedded server only; logging slows the server: the figures of such a run are not its speed)",
    )
    args = parser.parse_args()
    if args.statements and not hasattr(test_settings, "_server"):
        parser.error("--statements needs the embedded server: unset DATABASE_URL")
    if args.pages < 1 or args.hosts < 1 or args.delay < 0 or args.latency_ms < 0:
        parser.error("--hosts and --pages must be positive, --delay and --latency-ms not negative")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    workers = args.workers or settings.LEITSTAND_POOLS["crawl"]["workers"]
    latency = args.latency_ms / 1000
    print(
        f"{args.hosts} hosts × {args.pages} pages (+ robots.txt, + /private/x which it forbids), answers "
        f"{args.latency_ms:g} ms late, delay {args.delay:g} s; crawl pool: {workers} workers"
        f"{' (--workers)' if args.workers else ' (the pool default)'}; {os.cpu_count()} cores; "
        f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )

    baseline = None
    if not args.skip_bare:
        baseline = bare(args)
        baseline["politeness"] = politeness(baseline["records"], args.delay)
        print(f"bare crawler: {baseline['pages']} pages in {baseline.get('seconds', 0):.1f} s", flush=True)

    logs = Path(tempfile.mkdtemp(prefix="crawl-web-logs-"))
    result = leitstand(args, workers, logs)
    ours = run_report(result, args)
    ours["politeness"] = politeness(result["records"], args.delay)

    start_to_start = args.hosts / max(args.delay, latency) if max(args.delay, latency) > 0 else float("inf")
    end_to_start = args.hosts / (args.delay + latency) if args.delay + latency > 0 else float("inf")
    print(
        f"\nthe crawl at the politeness limit ({args.hosts} hosts, {args.pages} pages each, tree depth "
        f"{tree_depth(args.pages)})"
    )
    print(
        f"politeness bound: {args.hosts} / max({args.delay:g} s, {latency:g} s) = {start_to_start:.1f} pages/s "
        f"(start to start); {args.hosts} / ({args.delay:g} s + {latency:g} s) = {end_to_start:.1f} pages/s "
        "(end to start)"
    )
    if not result["finished"]:
        print(f"!! Leitstand's run did NOT finish within {args.timeout:g} s: the figures are up to its last completion")
    print(
        f"leitstand: pools idle after {result['ready_after']:.1f} s; load at the run's start "
        f"{' '.join(f'{x:.2f}' for x in result['load'])}; the run's last completion "
        f"{ours['run_seconds'] or 0:.1f} s after crawl_start; crawl pool logs in {logs}"
    )

    rows = []

    def row(label: str, theirs, mine, fmt: str = "{:.1f}", compare: bool = True) -> None:
        def shown(value):
            return "—" if value is None else fmt.format(value) if not isinstance(value, str) else value

        rows.append((label, shown(theirs), shown(mine), ratio(mine, theirs) if compare else ""))

    b = baseline or {}
    bp: Politeness | None = b.get("politeness")
    op: Politeness = ours["politeness"]
    cpu = ours["cpu"]
    window_pages = ours["window_pages"] or 1
    b_rate, o_rate = b.get("rate"), ours["rate"]
    row("pages crawled (crawl jobs done, page fetched)", b.get("pages"), ours["pages"], "{:,}")
    row("pages skipped (robots.txt forbids)", b.get("skipped"), ours["skipped"], "{:,}")
    row("pages/s, first to last completion", b_rate, o_rate, "{:.1f}")
    row("seconds, first to last completion", b.get("seconds"), ours["seconds"], "{:.1f}")
    row(
        "fraction of the start-to-start bound",
        b_rate and b_rate / start_to_start,
        o_rate and o_rate / start_to_start,
        "{:.3f}",
    )
    row(
        "fraction of the end-to-start bound",
        b_rate and b_rate / end_to_start,
        o_rate and o_rate / end_to_start,
        "{:.3f}",
    )
    row(
        "CPU ms per page (bare: its process; leitstand: total)",
        b.get("cpu") and b["cpu"] * 1000 / b["window_pages"],
        cpu["total"] * 1000 / window_pages if cpu else None,
        "{:.1f}",
    )
    row(
        "simulated web's CPU ms per page (bare: whole crawl)",
        b.get("server_cpu") and b["server_cpu"] * 1000 / b["pages"],
        cpu["simulated web"] * 1000 / window_pages if cpu else None,
        "{:.1f}",
    )
    row("requests at the server", bp and bp.requests, op.requests, "{:,}")
    row("politeness violations (overlaps + short gaps)", bp and bp.violations, op.violations, "{:,}")
    row("  overlaps (arrived while another was answered)", bp and len(bp.overlaps), len(op.overlaps), "{:,}")
    row(
        f"  short gaps (start to start < {(args.delay - TOLERANCE) * 1000:.0f} ms)",
        bp and len(bp.short_gaps),
        len(op.short_gaps),
        "{:,}",
    )
    for label, values in (("start to start", "robots_to_page"), ("end to start", "robots_end_to_page")):
        for name, how in (("min", min), ("median", statistics.median)):
            row(
                f"robots.txt → first page, {label}, {name} ms",
                bp and ms(getattr(bp, values), how),
                ms(getattr(op, values), how),
                "{}",
                compare=False,
            )
    row("fetches in flight at the server, time-averaged", bp and bp.in_flight_mean, op.in_flight_mean, "{:.1f}")
    row("fetches in flight at the server, peak", bp and bp.in_flight_peak, op.in_flight_peak, "{:,}")

    def gap(politeness, share):
        return (
            politeness.gaps[int(share * (len(politeness.gaps) - 1))] * 1000 if politeness and politeness.gaps else None
        )

    for share in (0.5, 0.9):
        row(f"a host's requests, start to start, p{share * 100:.0f} ms", gap(bp, share), gap(op, share), "{:.0f}")
    width = max(len(r[0]) for r in rows)
    print(f"\n{'':<{width}} {'bare crawler':>13} {'leitstand':>11} {'leitstand ÷ bare':>17}")
    for label, theirs, mine, quotient in rows:
        print(f"{label:<{width}} {theirs:>13} {mine:>11} {quotient:>17}")
    if baseline and baseline["counts"]:
        print(f"bare crawler's counts: {dict(baseline['counts'])}")

    if cpu:
        print(f"\nleitstand: CPU in the measured window ({ours['seconds']:.1f} s, {ours['window_pages']:,} pages)")
        print(f"{'':<58} {'CPU s':>8} {'ms per page':>12} {'processes seen':>15}")
        seen = result["seen"]
        for name, label in (
            ("crawl pool", "crawl pool (runpool's whole process tree)"),
            ("control", "control process (its tree)"),
            ("PostgreSQL", f"PostgreSQL (postmaster {result['postmaster']} and backends; bench's own out)"),
            ("total", "total: pool + control + PostgreSQL"),
            ("simulated web", "simulated web server (not in the total)"),
        ):
            print(f"{label:<58} {cpu[name]:>8.2f} {cpu[name] * 1000 / window_pages:>12.1f} {seen.get(name, ''):>15}")
        rss = result["peak_rss"]
        print(
            f"peak RSS (summed over the tree's processes): crawl pool {rss.get('crawl pool', 0) / 2**20:.0f} MiB "
            f"({result['peak_processes'].get('crawl pool', 0)} processes at most), control "
            f"{rss.get('control', 0) / 2**20:.0f} MiB ({result['peak_processes'].get('control', 0)} processes)"
        )
        pss = result["peak_pss"]
        print(
            f"peak PSS (pages shared by forked processes counted once): crawl pool "
            f"{pss.get('crawl pool', 0) / 2**20:.0f} MiB, control {pss.get('control', 0) / 2**20:.0f} MiB"
        )
    attempts = sum(n for _, _, n in ours["attempts"])
    print(
        f"claims per page: {attempts:,} attempts / {ours['jobs']:,} crawl jobs = "
        f"{attempts / max(ours['jobs'], 1):.2f} per crawl job"
    )
    print(f"what a page cost the database: {per_job(*result['costs'], max(ours['jobs'], 1))}")
    p50, p90, p99 = ours["held"]
    print(
        f"  an attempt from its claim to its end: p50 {p50 * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
    )
    p50, p90, p99 = ours["waited"]
    print(
        f"  a host's next page, from the end of the one before to its claim: p50 {p50 * 1000:.0f} ms, "
        f"p90 {p90 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
    )
    outcomes = Counter()
    for outcome, _, n in ours["attempts"]:
        outcomes[outcome or "(open)"] += n
    print(f"  attempts by outcome: {', '.join(f'{k} {v:,}' for k, v in outcomes.most_common())}")
    reasons = [(f"{o or '(open)'}: {e or '—'}", n) for o, e, n in ours["attempts"] if o not in ("completed", "skipped")]
    if reasons:
        print(f"  other attempts by error class: {', '.join(f'{k} {v:,}' for k, v in reasons)}")
    print(f"  crawl jobs by state: {', '.join(f'{k} {v:,}' for k, v in sorted(ours['states'].items()))}")
    not_done = {k: v for k, v in ours["states"].items() if k != "done"}
    print(f"  ended dead or failed (or not ended): {sum(not_done.values()):,} {not_done or ''}")

    for name, found in (("bare crawler", bp), ("leitstand", op)):
        if found is None or not found.violations:
            continue
        pairs = Counter(f"{kind(a)} → {kind(b)}" for _, a, b, _ in found.short_gaps)
        print(
            f"\n{name}: {len(found.short_gaps):,} short gaps ({', '.join(f'{k} {v:,}' for k, v in pairs.most_common())}), "
            f"{len(found.overlaps):,} overlaps; the first {SHOWN_VIOLATIONS} of each:"
        )
        for host, earlier, later, gap in found.short_gaps[:SHOWN_VIOLATIONS]:
            print(f"  short gap  {host:<12} {earlier:<12} → {later:<12} {gap * 1000:7.1f} ms start to start")
        for host, earlier, later, early in found.overlaps[:SHOWN_VIOLATIONS]:
            print(f"  overlap    {host:<12} {later:<12} arrived {early * 1000:7.1f} ms before {earlier} was answered")

    if result["statements"] is not None:
        _, log, offset = result["statements"]
        print(f"\nwhere the database time went, per page crawled (every statement of the run, {log}):")
        print(statement_log.summary(log, offset, per=ours["pages"]))


if __name__ == "__main__":
    main()
