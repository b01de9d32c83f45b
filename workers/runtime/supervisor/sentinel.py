"""A pool's supervisor: django-q2's Sentinel with hand-offs that no dead process can block.

The sentinel is one end of every channel to its children (``handoff.py`` says why: django-q2's
shared queue freezes the pool when a worker dies holding its lock). Around that hand-off it heals
the pool:

- the jobs a dead worker held are handed back at once (``rescue.py``), and idle workers are woken
  for them;
- liveness means progress (``stalls.py``): a wake-up that went missing costs one sweep interval, a
  stalled pool is woken, then its idle workers and pusher are restarted, and when that does not
  help either the stall is recorded on the pool's row, where the ``pool_stalled`` alert finds it;
- a worker that does not take the task it was handed, or runs past its time limit, is replaced;
- shutdown is bounded: running jobs finish or are handed back within
  ``LEITSTAND_POOL_SHUTDOWN_SECONDS``, then whatever is left is killed and its jobs handed back;
- every child dies with the sentinel, and the sentinel stops the pool when the pool's main process
  (``main.py``) is gone.

Written for django-q2 1.11.1 (``tests/runtime/test_supervisor.py`` pins it): it reuses django-q2's
worker, pusher and monitor functions unchanged and replaces the Sentinel's spawning, guard loop
and stop.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import time
import uuid

import setproctitle
from django import db
from django_q.cluster import Sentinel, get_mp_context
from django_q.conf import Conf
from django_q.monitor import monitor
from django_q.pusher import pusher
from django_q.status import Stat
from django_q.worker import worker

from jobs import options as engine_options
from workers.runtime import dispatch, lifecycle, options
from workers.runtime.supervisor.handoff import (
    HANDOFF_SECONDS,
    Handoff,
    TwoEndedQueue,
    Worker,
    child,
    describe_exit,
    local_wakeup,
    no_pusher,
)
from workers.runtime.supervisor.rescue import Rescuer
from workers.runtime.supervisor.stalls import Heal, StallWatch

logger = logging.getLogger("leitstand.supervisor")

# How often the supervisor looks for a stall and for jobs to hand back (one indexed query each).
PROGRESS_CHECK_SECONDS = 1.0
RESTARTED = "restarted: its pool claimed nothing while work was due"


class PoolSentinel(Sentinel):
    """The supervisor process of one pool (``Q_CLUSTER_NAME``) on this host."""

    def __init__(self, stop_event, start_event, cluster_id, broker=None, timeout=None):
        self.pool_name = os.environ["Q_CLUSTER_NAME"]
        self.host = engine_options.current().host_name
        self.workers: list[Worker] = []
        self.pending: collections.deque = collections.deque()  # wake-ups read from the pusher, not yet handed
        self.rescuer = Rescuer(self.pool_name, self.host)
        self.stop_requested = False
        self.stopping = False
        self.shutdown_seconds = options.current().pool_shutdown_seconds
        self.broker_away = False
        super().__init__(stop_event, start_event, cluster_id, broker, timeout, start=False)
        self.stalls = StallWatch(
            self.pool_name,
            self.host,
            f"{self.host}:{self.pid}",
            stall_seconds=options.current().pool_stall_seconds,
            wake_after_seconds=options.current().control_interval_seconds,
        )
        setproctitle.setproctitle(f"leitstand {self.pool_name} supervisor")
        self.task_queue, self.result_queue = self._new_task_queue(), TwoEndedQueue()
        # The pool's main process asks for a stop by SIGTERM (no shared lock it could die holding).
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.start()

    def _on_sigterm(self, signum, frame) -> None:
        self.stop_requested = True

    # --- spawning ------------------------------------------------------------------------------

    def _spawn(self, target, *args, running_slot=None) -> multiprocessing.Process:
        db.connections.close_all()  # a child must never share this process's database socket
        process = get_mp_context().Process(
            target=child,
            args=(target, self.pid, *args),
            kwargs={"running_slot": running_slot},
            name=f"Process-{uuid.uuid4().hex}",
        )
        process.daemon = True
        process.start()
        return process

    def spawn_worker(self) -> None:
        handoff = Handoff()
        timer = multiprocessing.Value("f", -1)
        running = multiprocessing.RawArray("c", 16)
        process = self._spawn(worker, handoff, handoff, timer, self.timeout, running_slot=running)
        handoff.worker_end.close()  # only the worker holds its end, so no later child inherits it
        self.workers.append(Worker(process, handoff, timer, running))
        self._sync_pool()

    def spawn_pusher(self) -> multiprocessing.Process:
        if options.current().tasks_only:  # no broker: its stall watch wakes its workers when work is due
            return self._spawn(no_pusher, self.task_queue, self.event_out, self.broker)
        return self._spawn(pusher, self.task_queue, self.event_out, self.broker)

    def spawn_monitor(self) -> multiprocessing.Process:
        return self._spawn(monitor, self.result_queue, self.broker)

    def spawn_cluster(self) -> None:
        self.workers = []
        self._stat_save()
        for _ in range(self.pool_size):
            self.spawn_worker()
        self.monitor = self.spawn_monitor()
        self.pusher = self.spawn_pusher()

    def _sync_pool(self) -> None:
        self.pool = [w.process for w in self.workers]  # what django-q2's status and Stat read

    def _new_task_queue(self) -> TwoEndedQueue:
        return TwoEndedQueue(maxsize=Conf.QUEUE_LIMIT or 0)

    def _replace_pusher(self, why: str) -> None:
        """A new pusher with a new task queue (and stop event): the dead one may hold their locks."""
        old = self.task_queue
        self.task_queue, self.event_out = self._new_task_queue(), multiprocessing.Event()
        old.cancel_join_thread()
        old.close()
        self.pusher = self.spawn_pusher()
        self.reincarnations += 1
        logger.critical("pool %s: pusher %s; started a new pusher with a new task queue", self.pool_name, why)

    def _replace_monitor(self, why: str) -> None:
        old = self.result_queue
        self.result_queue = TwoEndedQueue()
        old.cancel_join_thread()
        old.close()
        self.monitor = self.spawn_monitor()
        self.reincarnations += 1
        logger.critical("pool %s: monitor %s; started a new monitor with a new result queue", self.pool_name, why)

    # --- the guard loop ------------------------------------------------------------------------

    def guard(self) -> None:
        self.stalls.clear_stale()
        self.start_event.set()
        self._stat_save()
        logger.info("pool %s: supervisor %s guarding %d workers", self.pool_name, self.pid, len(self.workers))
        last = time.monotonic()
        next_progress_check = last + PROGRESS_CHECK_SECONDS
        next_stat = last
        try:
            while not self.stop_requested:
                if os.getppid() != self.parent_pid:
                    logger.critical("pool %s: the pool's main process is gone; stopping", self.pool_name)
                    break
                try:
                    self._serve(timeout=0.05)
                    now = time.monotonic()
                    # Capped: a round that blocked (a database call) must not count as the workers' time.
                    self._check_children(min(now - last, 1.0))
                    last = now
                    if now >= next_progress_check:
                        next_progress_check = now + PROGRESS_CHECK_SECONDS
                        live = {w.pid for w in self.workers}
                        if self.rescuer.retry(live) + self.rescuer.orphans(live):
                            self._wake_idle()  # start them again now, not at the next wake-up from elsewhere
                        self._watch_progress()
                    if now >= next_stat:
                        next_stat = now + Conf.GUARD_CYCLE
                        self._stat_save()
                except Exception:  # noqa: BLE001 - the supervisor must outlive any one bad round
                    logger.exception("pool %s: supervisor round failed; the next one follows", self.pool_name)
                    db.connections.close_all()
                    time.sleep(0.2)
        finally:
            self.stop()

    def _serve(self, timeout: float) -> None:
        """Wait briefly for results, deaths and wake-ups; hand wake-ups to idle workers."""
        by_end = {w.handoff.sentinel_end: w for w in self.workers}
        waitables = [*by_end, *(w.process.sentinel for w in self.workers)]
        if any(w.is_available for w in self.workers) and not self.pending and not self.stopping:
            waitables.append(self.task_queue._reader)  # noqa: SLF001 - a wake-up is waiting
        for ready in multiprocessing.connection.wait(waitables, timeout):
            if ready in by_end:
                self._receive(by_end[ready])
        if not self.stopping:
            self._dispatch()

    def _receive(self, w: Worker) -> None:
        try:
            message = w.handoff.sentinel_end.recv()
        except (EOFError, OSError):
            return  # it died; _check_children hands back what it held
        w.task = None
        if not message.get("local"):
            self.result_queue.put(message)  # django-q2's monitor acknowledges the wake-up
        result = message.get("result")
        if message.get("success") and isinstance(result, dict) and result.get("claimed"):
            self.stalls.claimed()

    def _dispatch(self) -> None:
        for w in self.workers:
            if not w.is_available:
                continue
            task = self._next_task()
            if task is None:
                return
            self._hand(w, task)

    def _hand(self, w: Worker, task: dict) -> None:
        try:
            w.handoff.sentinel_end.send(task)
        except OSError:  # it just died; the next idle worker gets the task
            self.pending.appendleft(task)
            return
        w.task, w.handed_at, w.taken = task, time.monotonic(), False

    def _next_task(self) -> dict | None:
        if self.pending:
            return self.pending.popleft()
        try:
            return self.task_queue.get(block=False)
        except (queue.Empty, OSError, EOFError):
            return None

    def _check_children(self, elapsed: float) -> None:
        for w in list(self.workers):
            if not w.process.is_alive():
                self._worker_ended(w)
                continue
            lock = w.timer.get_lock()
            if not lock.acquire(timeout=0.01):
                continue  # the worker is updating it; look again next time
            try:
                timer = w.timer.value
                if timer > 0:
                    w.timer.value = timer = max(timer - elapsed, 0.0)
            finally:
                lock.release()
            if timer > 0:
                w.taken = True
            if timer == 0:
                self._kill(w, "ran past its wake-up timeout")
            elif (
                w.task is not None and not w.taken and timer == -1 and time.monotonic() - w.handed_at > HANDOFF_SECONDS
            ):
                if w.handoff.sentinel_end.poll(0):  # it did run it, quicker than we looked: its result is here
                    self._receive(w)
                    continue
                if not w.task.get("local"):
                    self.pending.appendleft(w.task)
                w.task = None
                self._kill(w, f"did not take the task it was handed within {HANDOFF_SECONDS:g} s")
        if not self.stopping:
            if not self.monitor.is_alive():
                self._replace_monitor(describe_exit(self.monitor.exitcode))
            if not self.pusher.is_alive():
                self._replace_pusher(describe_exit(self.pusher.exitcode))

    def _kill(self, w: Worker, why: str) -> None:
        logger.critical("pool %s: worker %s %s; killing it", self.pool_name, w.pid, why)
        w.process.kill()
        w.process.join(timeout=5)
        self._worker_ended(w, why=why)

    def _worker_ended(self, w: Worker, *, why: str | None = None) -> None:
        self.workers.remove(w)
        self._sync_pool()
        w.handoff.sentinel_end.close()
        if w.task is not None and not w.task.get("local"):
            # A wake-up it was handed, taken or not: another worker runs it (running it twice is harmless).
            self.pending.appendleft(w.task)
        timer = w.timer.get_obj().value  # never the lock: a dead worker may hold it
        recycled = w.process.exitcode == 0 and timer == -2
        if timer == 0 and not why:
            why = "ran past its wake-up timeout"
        if not self.stopping:
            self.reincarnations += 1
            if recycled:
                logger.info("pool %s: recycled worker %s", self.pool_name, w.pid)
            self.spawn_worker()  # first, so the jobs handed back below find it waiting
        if why or not (w.process.exitcode == 0 and (recycled or w.told_to_stop)):
            reason = f"worker {self.host}:{w.pid} {why or describe_exit(w.process.exitcode)}"
            logger.critical("pool %s: %s", self.pool_name, reason)
            if self.rescuer.rescue(w.pid, reason, running=lifecycle.running_job_of(w.running)) and not self.stopping:
                self._wake_idle()  # start them again now, not at the next wake-up from elsewhere
            return
        self.rescuer.stopped(w.pid, "recycled" if recycled else "SIGTERM: the pool is shutting down")

    # --- liveness means progress -----------------------------------------------------------------

    def _watch_progress(self) -> None:
        idle = [w for w in self.workers if w.is_available]
        heal = self.stalls.check(len(idle))
        if heal is Heal.RESTART:
            for w in idle:
                self._kill(w, RESTARTED)
            self.pusher.kill()
            self.pusher.join(timeout=5)
            self._replace_pusher(RESTARTED)
        if heal is not Heal.NONE:
            self._wake_idle()

    def _wake_idle(self) -> None:
        for w in self.workers:
            if w.is_available:
                self._hand(w, local_wakeup(self.pool_name))

    def _stat_save(self) -> None:
        """django-q2's cluster statistics, which it keeps in the broker (Redis; the ORM broker keeps
        none). While the broker is away they wait; that is reported once. A tasks-only pool keeps none:
        django-q2 signs them with the secret key that pool does not have."""
        if options.current().tasks_only:
            return
        if options.current().wakeup_redis_url:
            try:
                self.broker.connection.ping()
            except dispatch.broker_errors() as unreachable:
                if not self.broker_away:
                    logger.warning("pool %s: the wake-up broker cannot be reached (%s)", self.pool_name, unreachable)
                self.broker_away = True
                return
            if self.broker_away:
                logger.warning("pool %s: the wake-up broker is reachable again", self.pool_name)
            self.broker_away = False
        Stat(self).save()

    # --- bounded shutdown ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop within the shutdown time: running jobs finish or are handed back, then the rest is killed."""
        self.stopping = True
        self.stop_event.set()
        deadline = time.monotonic() + self.shutdown_seconds
        logger.info("pool %s: stopping (at most %g s)", self.pool_name, self.shutdown_seconds)
        lifecycle.drain_begin(int(os.environ.get(lifecycle.MAIN_PID_VARIABLE) or self.parent_pid))
        # The pusher holds nothing worth waiting for (a wake-up it fetched is a hint), and asking it
        # to stop through a shared event could block on a lock a dying pusher took with it.
        self.pusher.kill()
        self.pusher.join(timeout=5)
        self._drop_waiting_wakeups()
        last = time.monotonic()
        while self.workers and time.monotonic() < deadline:
            for w in self.workers:
                if w.task is None and not w.told_to_stop:
                    try:
                        w.handoff.sentinel_end.send("STOP")
                    except OSError:
                        pass
                    w.told_to_stop = True
            self._serve(timeout=0.05)
            now = time.monotonic()
            self._check_children(now - last)
            last = now
        for w in list(self.workers):
            self._kill(w, f"was still running when the pool's shutdown time of {self.shutdown_seconds:g} s ran out")
        self._drop_waiting_wakeups()  # those the ended workers held
        self.rescuer.retry({w.pid for w in self.workers})
        try:
            self.result_queue.put("STOP")
        except (OSError, ValueError):
            pass
        self.monitor.join(timeout=5)
        if self.monitor.is_alive():
            self.monitor.kill()
        self.result_queue.cancel_join_thread()
        self._stat_save()
        logger.info("pool %s: stopped", self.pool_name)

    def _drop_waiting_wakeups(self) -> None:
        """Wake-ups fetched but not handed out are only hints: acknowledge them, so none lingers."""
        while (task := self._next_task()) is not None:
            if task.get("ack_id") is not None:
                try:
                    self.broker.acknowledge(task["ack_id"])
                except Exception:  # noqa: BLE001 - a lingering hint is redelivered and harmless
                    logger.info("could not acknowledge wake-up %s", task.get("id"))
