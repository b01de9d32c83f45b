"""Worker processes' Prometheus counters. With PROMETHEUS_MULTIPROC_DIR set, each process writes
them to that directory, and the console's /metrics view aggregates every process of the host."""

import os
import re
from pathlib import Path

from prometheus_client import Counter

WORKER_JOBS = Counter("leitstand_worker_jobs", "Jobs a worker process handled, by outcome", ["pool", "outcome"])
WORKER_WAKEUPS = Counter("leitstand_worker_wakeups", "Wake-ups a worker process ran", ["pool", "found_work"])


def multiprocess_dir_clean() -> list[str]:
    """At start-up: remove the metric files of processes that no longer run (prometheus_client names
    them ``<kind>_<pid>.db``), so the directory never grows with recycled workers. Files of live
    processes — other pools on this host — stay. Returns the removed file names."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return []
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    removed = []
    for file in path.glob("*.db"):
        match = re.search(r"_(\d+)\.db$", file.name)
        if match and not _is_running(int(match.group(1))):
            file.unlink(missing_ok=True)
            removed.append(file.name)
    return removed


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
