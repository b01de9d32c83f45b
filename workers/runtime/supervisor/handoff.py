"""The channels between a pool's sentinel and its children, with one process at each end.

django-q2 hands tasks from its pusher to its workers through one shared ``multiprocessing.Queue``.
The worker blocked in ``get()`` holds the queue's read lock; when that worker is killed (the OOM
killer, ``kill -9``, a container limit) the lock stays held by a dead process, every other worker
blocks on it, nothing runs again, the workers still look alive, and SIGTERM no longer stops the
pool (django-q2 #23, open since 2022; #339 for the result queue's write lock). Releasing a lock a
dead process held is unsafe; what is safe is to let no lock be shared by processes that may die.

So the sentinel — the process that sees every child die — is one end of every channel:

- each worker has a private pipe to the sentinel (``Handoff``: tasks in, results out; no lock at
  all), and gets a task only while it is idle: a dead worker takes nothing but its own pipe with it;
- the pusher's task queue has one writer (the pusher) and one reader (the sentinel); the result
  queue one writer (the sentinel) and one reader (the monitor) (``TwoEndedQueue``). When the pusher
  or the monitor dies, its queue, whose lock it may have died holding, is replaced together with it;
- every child dies with the sentinel (``child``: ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.queues
import os
import signal
import sys
import uuid
from dataclasses import dataclass

from jobs import tracing
from workers.runtime import lifecycle

# A worker that has not taken the task it was handed within this time is frozen (SIGSTOP, a
# deadlock before its loop): it is replaced and the task goes to another worker.
HANDOFF_SECONDS = 5.0

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def child(target, parent_pid: int, *args, running_slot=None) -> None:
    """Run a child of the sentinel that dies with it, even when the sentinel is killed by SIGKILL."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the supervisor's own stop request
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the sentinel died before the request took effect
        os._exit(1)
    if running_slot is not None:
        lifecycle.running_slot_attach(running_slot)
    try:
        target(*args)
    finally:
        # A child ends with os._exit (multiprocessing), so no atexit: its spans still queued are sent now.
        tracing.flush()


class TwoEndedQueue(multiprocessing.queues.Queue):
    """A queue between exactly two processes. django-q2's own Queue also counts its items in a
    shared counter with a lock of its own, one more lock a dying pusher could take with it."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize, ctx=multiprocessing.get_context())


class Handoff:
    """One worker's private channel to its sentinel: tasks in, results out.

    django-q2's worker loop calls ``get()`` for its next task and ``put()`` for its result; both
    are plain pipe reads and writes with one process at each end, so no other process's death can
    block them. While it waits, the worker's loop beats (``lifecycle.loop_beat``): its registry
    row stays live only while the loop that takes work is alive.
    """

    def __init__(self) -> None:
        self.sentinel_end, self.worker_end = multiprocessing.Pipe(duplex=True)

    def get(self):
        while not self.worker_end.poll(1.0):
            lifecycle.loop_beat()
        lifecycle.loop_beat()
        return self.worker_end.recv()

    def put(self, task) -> None:
        self.worker_end.send(task)


@dataclass
class Worker:
    """A worker as its sentinel sees it."""

    process: multiprocessing.Process
    handoff: Handoff
    timer: object  # django-q2's shared Value: -1 idle, > 0 seconds left of its task, 0 timed out, -2 recycled
    running: object  # the job whose handler it runs (lifecycle.running_job_set), read after it died
    task: dict | None = None  # handed to it, result not yet back
    handed_at: float = 0.0
    taken: bool = False  # it was seen running the task handed to it
    told_to_stop: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def is_available(self) -> bool:
        """Idle, and neither stopping nor recycling itself (it exits after its last result)."""
        return self.task is None and not self.told_to_stop and self.timer.get_obj().value != -2


def local_wakeup(pool: str) -> dict:
    """A wake-up the supervisor hands a worker itself, without the broker (so nothing to acknowledge)."""
    return {
        "id": uuid.uuid4().hex,
        "name": "supervisor-wakeup",
        "func": "workers.tasks.wake",
        "args": (pool,),
        "kwargs": {},
        "local": True,
    }


def describe_exit(code: int | None) -> str:
    """How a process ended, in words: ``killed by SIGKILL``, ``exited with code 1``."""
    if code is None:
        return "disappeared"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def no_pusher(task_queue, stop_event, broker) -> None:
    """The pusher of a tasks-only pool (``LEITSTAND_TASKS_ONLY``): it reads no broker, whose wake-ups
    are signed with the secret key that pool does not have; its supervisor's stall watch hands the
    idle workers wake-ups of its own when work is due (one sweep interval at most). It waits for the
    stop, as django-q2's pusher does."""
    while not stop_event.wait(1.0):
        pass
