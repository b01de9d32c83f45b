"""A pool's supervisor: django-q2's Sentinel with hand-offs that no dead process can block.

django-q2 hands tasks from its pusher to its workers through one shared ``multiprocessing.Queue``.
The worker blocked in ``get()`` holds the queue's read lock; when that worker is killed (the OOM
killer, ``kill -9``, a container limit) the lock stays held by a dead process, every other worker
blocks on it, nothing runs again, the workers still look alive, and SIGTERM no longer stops the
pool (django-q2 #23, open since 2022; #339 for the result queue's write lock). Releasing a lock a
dead process held is unsafe; what is safe is to let no lock be shared by processes that may die.

So the sentinel — the process that sees every child die — is one end of every channel:

- each worker has a private pipe to the sentinel (tasks in, results out; no lock at all), and gets
  a task only while it is idle: a dead worker takes nothing but its own pipe with it;
- the pusher's task queue has one writer (the pusher) and one reader (the sentinel); the result
  queue one writer (the sentinel) and one reader (the monitor). When the pusher or the monitor
  dies, its queue, whose lock it may have died holding, is replaced together with it.

Around that hand-off the supervisor heals the pool:

- the jobs a dead worker held are handed back at once (``leases.rescue_from_dead_worker``): a
  first death keeps the job's place in line, repeated deaths mark a suspected poison job;
- a wake-up that went missing (or a wake-up broker that is away) costs one sweep interval: with
  due work, idle workers and no claim for ``LEITSTAND_CONTROL_INTERVAL_SECONDS``, the supervisor
  hands its idle workers a wake-up itself;
- liveness means progress: a pool with due work, an idle worker and no claim for
  ``LEITSTAND_POOL_STALL_SECONDS`` is stalled. It wakes its idle workers itself (the wake-ups may
  be what went missing), then restarts them and the pusher, and when that does not help either it
  records the stall on the pool's row, where the ``pool_stalled`` alert finds it;
- shutdown is bounded: running jobs finish or are handed back within
  ``LEITSTAND_POOL_SHUTDOWN_SECONDS``, then whatever is left is killed and its jobs handed back;
- every child dies with the sentinel (``PR_SET_PDEATHSIG``), and the sentinel stops the pool when
  the pool's main process is gone.

Written for django-q2 1.11.1 (``tests/runtime/test_supervisor.py`` pins it): it reuses django-q2's
worker, pusher and monitor functions unchanged and replaces the Sentinel's spawning, guard loop
and stop.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.queues
import os
import queue
import signal
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil
import setproctitle
from django import db
from django.db import Error as DatabaseError
from django.db import connection, transaction
from django_q.cluster import Cluster, Sentinel, get_mp_context
from django_q.conf import Conf
from django_q.monitor import monitor
from django_q.pusher import pusher
from django_q.status import Stat
from django_q.worker import worker

from jobs import leases, reads
from jobs import options as engine_options
from jobs.models import LeitstandNow
from jobs.retry import FALLBACK_POLICY
from workers.runtime import dispatch, lifecycle, options
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.registry import registry

logger = logging.getLogger("leitstand.supervisor")

# A worker that has not taken the task it was handed within this time is frozen (SIGSTOP, a
# deadlock before its loop): it is replaced and the task goes to another worker.
HANDOFF_SECONDS = 5.0
# How often the supervisor looks for a stall (one indexed query).
PROGRESS_CHECK_SECONDS = 1.0
# The longest a database statement of the supervisor may take.
DATABASE_TIMEOUT_MS = 3000

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _child(target, parent_pid: int, *args, running_slot=None) -> None:
    """Run a child of the sentinel that dies with it, even when the sentinel is killed by SIGKILL."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the supervisor's own stop request
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the sentinel died before the request took effect
        os._exit(1)
    if running_slot is not None:
        lifecycle.running_slot_attach(running_slot)
    target(*args)


class _Queue(multiprocessing.queues.Queue):
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
class _Worker:
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


@contextmanager
def _bounded():
    """A transaction whose statements give up after a few seconds: the supervisor's loop also hands
    out the work, so a database call must never hold it long (a lock wait, a slow server)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(DATABASE_TIMEOUT_MS)])
        yield


def _local_wakeup(pool: str) -> dict:
    """A wake-up the supervisor hands a worker itself, without the broker (so nothing to acknowledge)."""
    return {
        "id": uuid.uuid4().hex,
        "name": "supervisor-wakeup",
        "func": "workers.tasks.wake",
        "args": (pool,),
        "kwargs": {},
        "local": True,
    }


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "disappeared"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class _Progress:
    """What the stall watch knows: when work was last claimed, since when work is due, what it tried."""

    claimed_at: float = field(default_factory=time.monotonic)
    due_since: float | None = None
    heals: int = 0
    recorded: bool = False


class PoolSentinel(Sentinel):
    def __init__(self, stop_event, start_event, cluster_id, broker=None, timeout=None):
        self.pool_name = os.environ["Q_CLUSTER_NAME"]
        self.host = engine_options.current().host_name
        self.workers: list[_Worker] = []
        self.pending: collections.deque = collections.deque()  # wake-ups read from the pusher, not yet handed
        self.progress = _Progress()
        self.unrescued: list[tuple] = []  # (pid, reason, running) of dead workers whose jobs wait for the database
        self.stop_requested = False
        self.stopping = False
        self.shutdown_seconds = options.current().pool_shutdown_seconds
        self.stall_seconds = options.current().pool_stall_seconds
        self.wake_after_seconds = options.current().control_interval_seconds
        self.broker_away = False
        super().__init__(stop_event, start_event, cluster_id, broker, timeout, start=False)
        setproctitle.setproctitle(f"leitstand {self.pool_name} supervisor")
        self.task_queue, self.result_queue = self._new_task_queue(), _Queue()
        # The pool's main process asks for a stop by SIGTERM (no shared lock it could die holding).
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.start()

    def _on_sigterm(self, signum, frame) -> None:
        self.stop_requested = True

    @property
    def identity(self) -> str:
        return f"{self.host}:{self.pid}"

    # --- spawning ------------------------------------------------------------------------------

    def _spawn(self, target, *args, running_slot=None) -> multiprocessing.Process:
        db.connections.close_all()  # a child must never share this process's database socket
        process = get_mp_context().Process(
            target=_child,
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
        self.workers.append(_Worker(process, handoff, timer, running))
        self._sync_pool()

    def spawn_pusher(self) -> multiprocessing.Process:
        return self._spawn(pusher, self.task_queue, self.event_out, self.broker)

    def spawn_monitor(self) -> multiprocessing.Process:
        return self._spawn(monitor, self.result_queue, self.broker)

    def spawn_cluster(self) -> None:
        self.workers = []
        Stat(self).save()
        for _ in range(self.pool_size):
            self.spawn_worker()
        self.monitor = self.spawn_monitor()
        self.pusher = self.spawn_pusher()

    def _sync_pool(self) -> None:
        self.pool = [w.process for w in self.workers]  # what django-q2's status and Stat read

    def _new_task_queue(self) -> _Queue:
        return _Queue(maxsize=Conf.QUEUE_LIMIT or 0)

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
        self.result_queue = _Queue()
        old.cancel_join_thread()
        old.close()
        self.monitor = self.spawn_monitor()
        self.reincarnations += 1
        logger.critical("pool %s: monitor %s; started a new monitor with a new result queue", self.pool_name, why)

    # --- the guard loop ------------------------------------------------------------------------

    def guard(self) -> None:
        self._clear_stale_stalls()
        self.start_event.set()
        Stat(self).save()
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
                        self._retry_rescues()
                        self._rescue_orphans()
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

    def _receive(self, w: _Worker) -> None:
        try:
            message = w.handoff.sentinel_end.recv()
        except (EOFError, OSError):
            return  # it died; _check_children hands back what it held
        w.task = None
        if not message.get("local"):
            self.result_queue.put(message)  # django-q2's monitor acknowledges the wake-up
        result = message.get("result")
        if message.get("success") and isinstance(result, dict) and result.get("claimed"):
            self._progressed()

    def _dispatch(self) -> None:
        for w in self.workers:
            if not w.is_available:
                continue
            task = self._next_task()
            if task is None:
                return
            self._hand(w, task)

    def _hand(self, w: _Worker, task: dict) -> None:
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
                self._replace_monitor(_describe_exit(self.monitor.exitcode))
            if not self.pusher.is_alive():
                self._replace_pusher(_describe_exit(self.pusher.exitcode))

    def _kill(self, w: _Worker, why: str) -> None:
        logger.critical("pool %s: worker %s %s; killing it", self.pool_name, w.pid, why)
        w.process.kill()
        w.process.join(timeout=5)
        self._worker_ended(w, why=why)

    def _worker_ended(self, w: _Worker, *, why: str | None = None) -> None:
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
            reason = f"worker {self.host}:{w.pid} {why or _describe_exit(w.process.exitcode)}"
            logger.critical("pool %s: %s", self.pool_name, reason)
            self._rescue(w.pid, reason, running=lifecycle.running_job_of(w.running))
            return
        # It ended as asked: its registry row says so at once (consoles and alerts count live rows).
        try:
            with _bounded():
                self._registry_stopped(w.pid, "recycled" if recycled else "SIGTERM: the pool is shutting down")
        except DatabaseError:
            db.connections.close_all()

    # --- handing back a dead worker's jobs -------------------------------------------------------

    def _rescue(self, pid: int, reason: str, *, running=True) -> None:
        """``running``: the job whose handler ran when it died (None: none; True: not known)."""
        if not self._try_rescue(pid, reason, running):
            self.unrescued.append((pid, reason, running))  # the database is away: again next round

    def _retry_rescues(self) -> None:
        mine = {w.pid for w in self.workers}
        # A pid may have been reused by now (a long database outage): then the reaper takes over.
        self.unrescued = [
            (pid, reason, running)
            for pid, reason, running in self.unrescued
            if pid not in mine and not psutil.pid_exists(pid) and not self._try_rescue(pid, reason, running)
        ]

    def _try_rescue(self, pid: int, reason: str, running) -> bool:
        owner = leases.WorkerIdentity(self.host, pid, self.pool_name).lease_owner
        poison = options.current().poison_deaths
        try:
            with _bounded():
                rescued = [
                    r
                    for t in registry.for_pool(self.pool_name)
                    for r in leases.rescue_from_dead_worker(
                        lease_owner=owner,
                        reason=reason,
                        policy=t.retry,
                        poison_deaths=poison,
                        running=running,
                        job_type=t.name,
                    )
                ]
                rescued += leases.rescue_from_dead_worker(
                    lease_owner=owner, reason=reason, policy=FALLBACK_POLICY, poison_deaths=poison, running=running
                )
                self._registry_stopped(pid, reason)
        except DatabaseError:
            logger.warning("pool %s: could not hand back the jobs of %s yet", self.pool_name, owner, exc_info=True)
            db.connections.close_all()
            return False
        if rescued:
            logger.warning(
                "pool %s: handed back %d jobs of %s: %s",
                self.pool_name,
                len(rescued),
                owner,
                ", ".join(f"{r.job_id} → {r.to_state}" for r in rescued),
            )
            if not self.stopping:
                self._wake_idle()  # start them again now, not at the next wake-up from elsewhere
        return True

    def _rescue_orphans(self) -> None:
        """Hand back the jobs of this host's workers of this pool that are gone although nobody saw
        them die: the children of a supervisor that was killed, or of an earlier run of this pool
        that crashed. A worker counts as gone when no process has its pid here and its jobs missed
        two heartbeats; a live worker of another PID namespace with the same host name heartbeats,
        so it is never taken for gone. Otherwise only the reaper would find them, after lease + grace."""
        silent = 2 * max((t.heartbeat_seconds for t in registry.for_pool(self.pool_name)), default=10.0)
        try:
            with _bounded():
                owners = [owner for (owner,) in reads.rows("lease_owners_silent", host=f"{self.host}:", silent=silent)]
        except DatabaseError:
            db.connections.close_all()
            return
        mine = {w.pid for w in self.workers}
        for owner in owners:
            pid_text = owner[len(self.host) + 1 : -len(self.pool_name) - 1]
            if not owner.endswith(f"/{self.pool_name}") or not pid_text.isdigit():
                continue  # another pool's, or another host whose name starts like this one's
            pid = int(pid_text)
            if pid not in mine and not psutil.pid_exists(pid):
                self._rescue(pid, f"worker {self.host}:{pid} is gone (no such process, no heartbeat for {silent:g} s)")

    def _registry_stopped(self, pid: int, reason: str) -> None:
        WorkerProcess.objects.filter(host=self.host, pid=pid, pool=self.pool_name, stopped_at__isnull=True).update(
            stopped_at=LeitstandNow(), stop_reason=reason[:255]
        )

    # --- liveness means progress -----------------------------------------------------------------

    def _progressed(self) -> None:
        self.progress.claimed_at = time.monotonic()
        self.progress.heals = 0
        if self.progress.recorded:
            self._record_stall(None)

    def _watch_progress(self) -> None:
        idle = [w for w in self.workers if w.is_available]
        try:
            with _bounded():
                has_due, is_paused = reads.row("pool_has_due_work", pool=self.pool_name)
        except DatabaseError:
            db.connections.close_all()  # a database outage is not a stall of this pool
            return
        now = time.monotonic()
        if is_paused or not has_due or lifecycle.is_draining():
            self.progress.due_since, self.progress.heals = None, 0
            if self.progress.recorded and not has_due:
                self._record_stall(None)
            return
        if self.progress.due_since is None:
            self.progress.due_since = now
        quiet = now - max(self.progress.claimed_at, self.progress.due_since)
        if quiet < self.stall_seconds or not idle:
            if idle and quiet >= self.wake_after_seconds:
                self._wake_idle()  # a wake-up went missing (or its broker is away): it costs one sweep interval
            return  # claiming, or every worker is busy (each bounded by its time limit)
        self.progress.heals += 1
        self.progress.due_since = now  # each healing step gets a window of its own
        heals = self.progress.heals
        if heals == 1:
            logger.warning(
                "pool %s: due work and %d idle workers, no claim for %.0f s; waking them",
                self.pool_name,
                len(idle),
                quiet,
            )
        elif heals == 2:
            logger.critical(
                "pool %s: still no claim after waking its workers; restarting %d idle workers and the pusher",
                self.pool_name,
                len(idle),
            )
            for w in idle:
                self._kill(w, "restarted: its pool claimed nothing while work was due")
            self.pusher.kill()
            self.pusher.join(timeout=5)
            self._replace_pusher("restarted: its pool claimed nothing while work was due")
        elif not self.progress.recorded:
            # Restarting again would only churn processes: report, and keep waking the workers.
            self._record_stall(
                f"due work, {len(idle)} idle workers and no claim for "
                f"{self.stall_seconds * heals:.0f} s on {self.host}, through 2 healing steps "
                "(wake-ups, then restarted workers and pusher)"
            )
        self._wake_idle()

    def _wake_idle(self) -> None:
        for w in self.workers:
            if w.is_available:
                self._hand(w, _local_wakeup(self.pool_name))

    def _stat_save(self) -> None:
        """django-q2's cluster statistics, which it keeps in the broker (Redis; the ORM broker keeps
        none). While the broker is away they wait; that is reported once."""
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

    def _record_stall(self, note: str | None) -> None:
        try:
            with _bounded():
                self._write_stall(note)
            self.progress.recorded = note is not None
        except DatabaseError:
            db.connections.close_all()

    def _write_stall(self, note: str | None) -> None:
        if note is None:
            if Pool.objects.filter(name=self.pool_name, stalled_on=self.identity).update(
                stalled_since=None, stalled_on="", stall_note=""
            ):
                logger.warning("pool %s: claiming again; stall cleared", self.pool_name)
        elif Pool.objects.filter(name=self.pool_name, stalled_since__isnull=True).update(
            stalled_since=LeitstandNow(), stalled_on=self.identity, stall_note=note[:500]
        ):
            logger.critical("pool %s: stalled: %s", self.pool_name, note)
        else:
            logger.critical("pool %s: stalled (another supervisor reported it first): %s", self.pool_name, note)

    def _clear_stale_stalls(self) -> None:
        """A stall reported by an earlier supervisor of this host that is gone would never clear."""
        try:
            with _bounded():
                for pool in Pool.objects.filter(name=self.pool_name, stalled_on__startswith=f"{self.host}:"):
                    pid = pool.stalled_on.rsplit(":", 1)[1]
                    if not pid.isdigit() or not psutil.pid_exists(int(pid)):
                        Pool.objects.filter(pk=pool.pk, stalled_on=pool.stalled_on).update(
                            stalled_since=None, stalled_on="", stall_note=""
                        )
        except DatabaseError:
            db.connections.close_all()

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
        self._retry_rescues()
        try:
            self.result_queue.put("STOP")
        except (OSError, ValueError):
            pass
        self.monitor.join(timeout=5)
        if self.monitor.is_alive():
            self.monitor.kill()
        self.result_queue.cancel_join_thread()
        Stat(self).save()
        logger.info("pool %s: stopped", self.pool_name)

    def _drop_waiting_wakeups(self) -> None:
        """Wake-ups fetched but not handed out are only hints: acknowledge them, so none lingers."""
        while (task := self._next_task()) is not None:
            if task.get("ack_id") is not None:
                try:
                    self.broker.acknowledge(task["ack_id"])
                except Exception:  # noqa: BLE001 - a lingering hint is redelivered and harmless
                    logger.info("could not acknowledge wake-up %s", task.get("id"))


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
                _describe_exit(self.sentinel.exitcode),
            )
            lifecycle.drain_clear(self.main_pid)  # it may have stopped on a signal of its own
            time.sleep(1)
            self.start()
