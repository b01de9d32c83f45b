"""The pool's main process (``manage.py runpool``): runs the supervisor, restarts it if it dies."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
import uuid

import setproctitle
from django_q.cluster import Cluster, get_mp_context

from workers.runtime import lifecycle, options
from workers.runtime.supervisor.handoff import describe_exit
from workers.runtime.supervisor.sentinel import PoolSentinel

logger = logging.getLogger("leitstand.supervisor")


class PoolCluster(Cluster):
    """The pool's main process: runs the supervisor, restarts it if it dies, stops it in bounded time.

    SIGTERM or Ctrl-C raises the drain flag (workers hand back what they hold and claim nothing
    new) and asks the supervisor to stop by SIGTERM. ``run()`` returns when the supervisor has
    exited after that; a supervisor that outlives the shutdown time by 15 s is killed (and its
    children with it). A supervisor that dies on its own is started again (its children die with
    it; the jobs they held come back when their leases expire).
    """

    def __init__(self, main_pid: int) -> None:
        super().__init__()
        self.main_pid = main_pid
        self.stop_deadline: float | None = None
        self.asked_to_stop: int | None = None  # the supervisor pid that was sent SIGTERM

    def start(self) -> int:
        setproctitle.setproctitle(f"leitstand {os.environ['Q_CLUSTER_NAME']} pool")
        self.stop_event, self.start_event = multiprocessing.Event(), multiprocessing.Event()
        self.sentinel = get_mp_context().Process(
            target=PoolSentinel,
            name=f"Process-{uuid.uuid4().hex}",
            args=(self.stop_event, self.start_event, self.cluster_id, self.broker, self.timeout),
        )
        self.sentinel.start()
        while not self.start_event.is_set():
            if not self.sentinel.is_alive():
                raise RuntimeError(f"the pool's supervisor exited with code {self.sentinel.exitcode} while starting")
            time.sleep(0.05)
        return self.pid

    def sig_handler(self, signum, frame) -> None:
        lifecycle.drain_begin(self.main_pid)
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + options.current().pool_shutdown_seconds + 15

    def run(self) -> None:
        while True:
            self.sentinel.join(timeout=0.1)
            if self.sentinel.is_alive():
                if self.stop_deadline is not None and self.asked_to_stop != self.sentinel.pid:
                    self.asked_to_stop = self.sentinel.pid
                    os.kill(self.sentinel.pid, signal.SIGTERM)
                if self.stop_deadline is not None and time.monotonic() > self.stop_deadline:
                    logger.critical("the pool's supervisor did not stop in time; killing it")
                    self.sentinel.kill()
                continue
            if self.stop_deadline is not None:
                return
            logger.critical(
                "the pool's supervisor %s %s; starting a new one",
                self.sentinel.pid,
                describe_exit(self.sentinel.exitcode),
            )
            lifecycle.drain_clear(self.main_pid)  # it may have stopped on a signal of its own
            time.sleep(1)
            self.start()
