"""Shutdown signalling between a pool's main process and its worker processes.

django-q2 tells its workers nothing when the pool's main process gets SIGTERM: they simply finish
their queue. So ``runpool`` creates a drain flag (a file named after its pid) when it is told to
stop, and the workers look for it between jobs and in their heartbeat thread: the job in hand is
finished or handed back at once, and nothing new is claimed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from uuid import UUID

from workers.runtime import options

MAIN_PID_VARIABLE = "LEITSTAND_POOL_MAIN_PID"


def drain_flag(main_pid: int) -> Path:
    return options.current().run_dir / f"drain-{main_pid}"


def drain_begin(main_pid: int) -> None:
    flag = drain_flag(main_pid)
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()


def drain_clear(main_pid: int) -> None:
    drain_flag(main_pid).unlink(missing_ok=True)


def is_draining() -> bool:
    """True in a worker whose pool's main process is stopping (a stat call: cheap enough per job)."""
    main_pid = os.environ.get(MAIN_PID_VARIABLE)
    return bool(main_pid) and drain_flag(int(main_pid)).exists()


# When the loop that takes work last showed it was alive (monotonic); None: no supervised loop runs
# in this process (a runtime driven directly, as in tests and ``manage.py`` commands).
_loop_seen: float | None = None


def loop_beat() -> None:
    """The worker's task loop is alive: waiting for work (at least every second) or taking a task."""
    global _loop_seen
    _loop_seen = time.monotonic()


def loop_is_alive(*, within: float) -> bool:
    return _loop_seen is None or time.monotonic() - _loop_seen <= within


# The job whose handler runs in this worker now, in memory the pool's supervisor shares (no lock:
# the supervisor reads it only after the worker died). None: not a supervised worker.
_running_slot = None


def running_slot_attach(slot) -> None:
    global _running_slot
    _running_slot = slot


# What the slot holds while a worker runs many jobs at once (a network-bound pool's in-flight loop):
# a death is then no one job's doing, and every job it held counts the death as an attempt.
MANY = UUID(bytes=b"\xff" * 16)


def running_job_set(job_id: UUID | None) -> None:
    if _running_slot is not None:
        _running_slot.raw = job_id.bytes if job_id is not None else bytes(16)


def running_job_of(slot) -> UUID | bool | None:
    """What a worker's slot says ran when it died (read by its supervisor): a job, True (many ran at
    once: every job it held ran), or None (none ran)."""
    raw = bytes(slot.raw)
    if raw == MANY.bytes:
        return True
    return UUID(bytes=raw) if any(raw) else None
