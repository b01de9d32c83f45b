"""Start real `runpool` processes (django-q2 clusters and the control process) against the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from tests.support.db import PROJECT_ROOT, child_env

# Short leases so that fault tests finish in seconds; the timing invariants still hold
# (heartbeat <= lease / 3, timeout < lease + grace).
FAST_TIMING = {
    "LEITSTAND_SYNTHETIC_LEASE_SECONDS": "2",
    "LEITSTAND_SYNTHETIC_HEARTBEAT_SECONDS": "0.5",
    "LEITSTAND_SYNTHETIC_TIMEOUT_SECONDS": "2.5",
    "LEITSTAND_SYNTHETIC_MAX_ATTEMPTS": "3",
    "LEITSTAND_LEASE_GRACE_SECONDS": "1",
    "LEITSTAND_CONTROL_INTERVAL_SECONDS": "0.2",
    "LEITSTAND_QUEUE_POLL_SECONDS": "0.05",
    "LEITSTAND_WAKEUP_TIMEOUT_SECONDS": "30",
    "LEITSTAND_PIPELINE_TIMEOUT_SECONDS": "10",
    "LEITSTAND_PIPELINE_LEASE_SECONDS": "12",
    "LEITSTAND_PIPELINE_HEARTBEAT_SECONDS": "1",
    "LEITSTAND_FETCH_TOTAL_SECONDS": "4",
    "LEITSTAND_CRAWL_WORKERS": "2",
    # The pool tests drive one job per worker (poison jobs, stalls, a frozen worker); many jobs in
    # flight in one worker have a drill of their own (tests/processes/test_in_flight_pools.py).
    "LEITSTAND_CRAWL_IN_FLIGHT": "1",
    "LEITSTAND_SYNTHETIC_WORKERS": "2",
    "LEITSTAND_ANALYSIS_WORKERS": "1",
    "LEITSTAND_RECHECK_WORKERS": "1",
}


def wait_for(condition: Callable[[], object], *, timeout: float, interval: float = 0.1, message: str = "") -> object:
    """Poll ``condition`` until it returns something truthy; fail with ``message`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {message or condition}")
        time.sleep(interval)


def demo_web_env(web) -> dict[str, str]:
    """What pool processes need to crawl the demo web: its two loopback sites allowed, politeness short."""
    return {"LEITSTAND_HTTP_ALLOWED_TARGETS": ",".join(web.targets), "LEITSTAND_HOST_MIN_DELAY_SECONDS": "0.05"}


class PoolProcesses:
    def __init__(self, run_dir: str, **extra_env: str) -> None:
        self.env = child_env(**{**FAST_TIMING, "LEITSTAND_RUN_DIR": run_dir, **extra_env})
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, str] = {}

    def start(self, name: str, *, key: str | None = None, **env: str) -> subprocess.Popen:
        """Start ``runpool name``; ``key`` names a second process of the same pool (default: the pool);
        ``env`` adds to its environment (a host name of its own, say)."""
        key = key or name
        log_path = os.path.join(self.env["LEITSTAND_RUN_DIR"], f"{key}.log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        log = open(log_path, "ab")
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runpool", name],
            cwd=PROJECT_ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[key] = process
        self.logs[key] = log_path
        return process

    def check_running(self) -> bool:
        """Fail at once, with its log, when a pool process has exited (e.g. a failed system check)."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"pool {name} exited with {process.returncode}: {self.log(name)[-2000:]}")
        return True

    def terminate(self, name: str, *, timeout: float = 30) -> int:
        """SIGTERM to the pool's main process only (the graceful path), then wait for it to exit."""
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=timeout)

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # stragglers of the group, if any
            except ProcessLookupError:
                pass
        self.processes.clear()

    def log(self, name: str) -> str:
        with open(self.logs[name], errors="replace") as f:
            return f.read()


def submit(payload=None, *, pool: str = "crawl", **fields):
    """Submit a synthetic job (``payload`` as in workers/runtime/synthetic.py) to ``pool``, as an
    operator may (an API client's go to the synthetic pool): the pool tests run the crawl pool."""
    from workers.runtime.services import job_submit

    return job_submit(
        job_type="synthetic",
        payload={"pool": pool, **(payload or {})},
        idempotency_key=uuid.uuid4().hex,
        actor="test",
        **fields,
    ).job


def state_of(job) -> str:
    from jobs.models import Job

    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def process_title(process) -> str:
    """A process's title as ``ps`` shows it (setproctitle may leave empty argument slots behind)."""
    return " ".join(" ".join(process.cmdline()).split())
