"""The worker side of a pool: a wake-up claims batches, runs handlers, and writes fenced outcomes.

One ``PoolRuntime`` lives in each worker process (django-q2 forks them; the runtime is made after
the fork). A wake-up (``workers.tasks.wake``) claims up to k due jobs of the pool and starts them in
one statement, runs each handler with its context and time limit, and completes the successful ones
in one fenced statement per batch. k adapts to the measured run time so a batch stays within
``LEITSTAND_BATCH_BUDGET_SECONDS``: short jobs run in large batches, long jobs one at a time.

A supervised heartbeat thread extends the leases of the jobs in hand at their types' intervals,
flushes their step events, and keeps the process's registry row fresh. When a heartbeat is refused
(the lease was lost) or the pool is shutting down, it sets the context's stop flag, so
``should_stop()`` turns true in the handler.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psutil
from django.db import close_old_connections, connection
from django_fsm import TransitionNotAllowed

from jobs import leases, logs, tracing
from jobs.errors import Deferred, ErrorKind, PermanentError, TransientError, classify, error_class_name
from jobs.models import Job, LeitstandNow
from workers.runtime import dispatch, lifecycle, options
from workers.runtime.claim_front import ClaimFront
from workers.runtime.context import Done, Interrupted, JobContext, NeedsReview, Skipped, Spawned, Stored
from workers.runtime.metrics import WORKER_JOBS, WORKER_WAKEUPS
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.registry import JobType, UnknownJobType, registry
from workers.runtime.services import job_submit, jobs_spawn_many

logger = logging.getLogger("leitstand.worker")

# A worker's task loop beats at least every second while it waits for work.
LOOP_STALE_SECONDS = 5.0
# Why a handler running in a thread past its type's timeout is asked to stop.
TIMED_OUT = "ran past its timeout"
# With many jobs in flight: how long the loop waits for one to end before it claims again (a key at
# rest — a host that may not be asked yet — is claimed when its rest ends), and how long it waits when
# the line has no key at rest to wait for (new jobs, a running limit with room again).
IN_FLIGHT_IDLE_SECONDS = 0.2
CLAIM_GATHER_SECONDS = 0.02
SHARED_SECONDS = 10.0
IN_FLIGHT_BUDGET_SECONDS = 30.0
# A job thread checks its database connection (its age, and with CONN_HEALTH_CHECKS a round trip)
# at most this often, not before every job.
CONNECTION_CHECK_SECONDS = 5.0
# How often the heartbeat thread looks at the jobs in hand (while the database answers).
HEARTBEAT_ROUND_SECONDS = 0.1


_job_thread = threading.local()  # what a job thread keeps between its jobs


class JobTimeout(TransientError):
    """The handler ran past its job type's timeout; counts as an attempt."""


@dataclass
class Limit:
    """What a ``time_limit`` block can ask afterwards: whether it was shortened to an outer limit
    (``clamped``), and whether its alarm went off (``fired``)."""

    clamped: bool = False
    fired: bool = False


@contextmanager
def time_limit(seconds: float, *, within_outer: bool = False) -> Iterator[Limit]:
    """Raise ``JobTimeout`` in the handler after ``seconds``, even inside a blocking call.

    django-q2 arms SIGALRM for the whole wake-up; the job's own, shorter limit borrows the timer
    and gives back what is left of django-q2's when the job ends. ``within_outer``: a limit for a
    part of a job (an image's decode) that never outlasts the job's own: shortened to what is left
    of it, and when it fires then, it *is* the job's time running out (the outer alarm is not armed
    again: one JobTimeout, not a second one a millisecond later while the first unwinds).
    """
    limit = Limit()
    if threading.current_thread() is not threading.main_thread():
        yield limit  # signals reach the main thread only; the heartbeat thread's stop flag still applies
        return
    previous_handler = signal.getsignal(signal.SIGALRM)
    outer_remaining, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    started = time.monotonic()
    if within_outer and outer_remaining and outer_remaining <= seconds:
        seconds, limit.clamped = outer_remaining, True

    def on_alarm(signum, frame):
        limit.fired = True
        raise JobTimeout(f"the handler ran past its timeout of {seconds:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield limit
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if outer_remaining and not (limit.clamped and limit.fired):
            signal.setitimer(signal.ITIMER_REAL, max(outer_remaining - (time.monotonic() - started), 0.001))


def _past_useful_life(job_id) -> bool:
    """Whether the job was created longer than ``LEITSTAND_DEFERRED_LIFE_HOURS`` ago (database time).
    Asked only when a job is deferred: one indexed read, not on any job's normal path."""
    life = timedelta(hours=options.current().deferred_life_hours)
    return Job.objects.filter(pk=job_id, created_at__lt=LeitstandNow() - life).exists()


def _seconds(value) -> float | None:
    """A handler's ``retry_after`` as seconds, or None when it is not a finite number: whatever a
    handler hands over, the failure path that reads it must not fail (it would strand its batch)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class Held:
    """A job in this process's hands: its lease is kept alive by the heartbeat thread."""

    job: leases.ClaimedJob
    job_type: JobType
    context: JobContext
    last_heartbeat: float = field(default_factory=time.monotonic)
    since: float = field(default_factory=time.monotonic)  # when it came into this process's hands


@dataclass
class WakeupReport:
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    released: int = 0
    refused: int = 0
    batches: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def add(self, other: WakeupReport) -> None:
        for name, value in other.__dict__.items():
            setattr(self, name, getattr(self, name) + value)


class PoolRuntime:
    _by_pool: dict[tuple[int, str], PoolRuntime] = {}

    @classmethod
    def for_pool(cls, pool: str) -> PoolRuntime:
        # Keyed by pid as well: a runtime (and its thread) must never cross a fork.
        key = (os.getpid(), pool)
        if key not in cls._by_pool:
            cls._by_pool[key] = cls(pool)
        return cls._by_pool[key]

    def __init__(self, pool: str) -> None:
        if refusal := options.current().pool_refusal(pool):
            raise ValueError(refusal)
        self.pool = pool
        self.worker = leases.WorkerIdentity.of_this_process(pool)
        self._types_set({t.name: t for t in registry.for_pool(pool)})
        # Why a job's type could not be made known when it was claimed (job ID → the error): its
        # attempt ends with it (_run_one).
        self._unmet: dict = {}
        self.flow_limit = registry.flow_limit(pool)  # a key's running limit unless an operator set its own
        # An attempt keeps its handler's warnings (jobs/logs.py); the runtime's own line about how it
        # ended is not one of them: the attempt shows its outcome and error itself.
        logs.keep_install(skip=frozenset({logger.name}))
        self.front = ClaimFront()  # where the last claim found the front of the line
        # Jobs this process runs at once: 1 runs each batch in this thread; more run in threads of their
        # own (network-bound pools: many fetches in flight, each job with its own lease and fence).
        self.in_flight = options.current().in_flight.get(pool, 1)
        self._executor: ThreadPoolExecutor | None = None
        self._shared: dict = {}
        self._shared_until = 0.0
        self.held: dict = {}
        self.held_lock = threading.Lock()
        self.seconds_per_job: float | None = None  # moving average of handler run time
        self.jobs_done = 0
        self.wakeups = 0
        self.duplicate_wakeups = 0
        self.current_job_id = None
        self.in_wakeup = False
        self._heartbeat_thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._stop_recorded = False

    def _types_set(self, types: dict[str, JobType]) -> None:
        # Replaced whole, never changed in place: the claim loop reads them while job threads run.
        self.types = types
        self.lease_by_type = {name: t.lease_seconds for name, t in types.items()}
        self.versions = {name: t.processing_version for name, t in types.items()}

    def _meet(self, claimed: list[leases.ClaimedJob]) -> None:
        """Make the types of claimed jobs known that this process has not met yet, by their apps'
        resolvers (a Django task's module imported by its path: workers/runtime/tasks.py) — before the
        jobs are held, so each is heartbeated and its timeout watched like any other. A job whose
        payload its type's resolver refuses ends with that refusal, and the next job of the type is
        tried; when the type cannot be made known here (its module not deployed), every job of it
        claimed ends with why."""
        for name in {job.type for job in claimed} - set(self.types):
            jobs = [job for job in claimed if job.type == name]
            for index, job in enumerate(jobs):
                try:
                    job_type = registry.resolve(name, job.payload, self.pool)
                except PermanentError as refused:  # this job's payload: the others may be fine
                    self._unmet[job.id] = refused
                    continue
                except Exception as failed:  # the type itself, here and now
                    self._unmet.update(dict.fromkeys((other.id for other in jobs[index:]), failed))
                    break
                if job_type.pool == self.pool or job_type.may_choose_pool:
                    self._types_set({**self.types, name: job_type})
                break

    # --- one wake-up ------------------------------------------------------------------------

    def wake(self) -> WakeupReport:
        """Claim and run batches until the pool has no due work or the wake-up's budget is spent."""
        self.wakeups += 1
        self._ensure_heartbeat_thread()
        self.in_wakeup = True
        try:
            return self._wake()
        finally:
            self.in_wakeup = False
            lifecycle.loop_beat()

    def _wake(self) -> WakeupReport:
        report = WakeupReport()
        if lifecycle.is_draining() or Pool.objects.filter(name=self.pool, is_paused=True).exists():
            return report
        until = time.monotonic() + options.current().wakeup_budget_seconds
        if self.in_flight > 1:
            # A loop with jobs in flight keeps claiming for longer than a batch loop: each end of a
            # wake-up waits for its jobs in flight and then for the next wake-up, taking nothing.
            until = max(until, time.monotonic() + IN_FLIGHT_BUDGET_SECONDS)
            # If this process dies now, every job it holds ran: each counts the death (a poison job
            # among them reaches the dead-letter queue after its deaths, as one run alone does).
            lifecycle.running_job_set(lifecycle.MANY)
            try:
                with dispatch.claiming_here(self.pool):
                    self._wake_in_flight(until, report)
            finally:
                lifecycle.running_job_set(None)
        while self.in_flight == 1 and time.monotonic() < until and not lifecycle.is_draining():
            limit = self.batch_size()
            claimed = self.front.claim(self._claim, limit)
            if not claimed:
                break
            report.claimed += len(claimed)
            report.batches += 1
            self._run_batch(claimed, report)
            if len(claimed) < limit:
                break
        if report.claimed == 0:
            self.duplicate_wakeups += 1
        WORKER_WAKEUPS.labels(self.pool, str(report.claimed > 0).lower()).inc()
        for outcome in ("completed", "failed", "released", "refused"):
            if getattr(report, outcome):
                WORKER_JOBS.labels(self.pool, outcome).inc(getattr(report, outcome))
        return report

    def _claim(self, limit: int, due_from: datetime | None) -> list[leases.ClaimedJob]:
        return leases.claim(
            pool=self.pool,
            worker=self.worker,
            lease_seconds=self.lease_by_type or 60,
            limit=limit,
            start=True,
            processing_versions=self.versions,
            advance_lanes=due_from is not None,
            flow_limit=self.flow_limit,
        )

    def _wake_in_flight(self, until: float, report: WakeupReport) -> None:
        """Up to ``in_flight`` jobs at once, each in a thread of its own: claim as many as there are
        free places, run each as the one-at-a-time loop runs it (its own lease, heartbeat, fence and
        error class), and write the ends of those that finished together. While it has jobs in
        flight, or due work it could not take yet (keys at rest: hosts that may not be asked yet),
        it claims again as places free up and rests pass, until the wake-up's budget is spent; then
        it waits for the jobs in flight. Shutting down, it claims nothing more and hands back what
        it has not begun."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix=f"{self.pool}-job")
        running: dict[Future, leases.ClaimedJob] = {}
        next_claim_at = 0.0  # monotonic: when the line may have more for this process
        completions: list[leases.Completion] = []
        try:
            while True:
                now = time.monotonic()
                is_open = now < until and not lifecycle.is_draining()
                claimed: list[leases.ClaimedJob] = []
                if is_open and len(running) < self.in_flight and now >= next_claim_at:
                    wanted = self.in_flight - len(running)
                    claimed = self.front.claim(self._claim, wanted)
                    self._meet(claimed)
                    report.claimed += len(claimed)
                    report.batches += bool(claimed)
                    shared = self._shared_now()
                    for job in claimed:
                        context = self._context(job, shared)
                        if job.type in self.types:
                            with self.held_lock:
                                self.held[job.id] = Held(job, self.types[job.type], context)
                        running[self._executor.submit(self._run_in_thread, job, context)] = job
                    if claimed and len(claimed) < wanted:
                        # Nothing more may start now, but the line moves: claim again after CLAIM_GATHER_SECONDS,
                        # so the keys whose rests end meanwhile come in one claim (a host every 5 ms at 100
                        # hosts and 0.5 s) instead of a claim each.
                        next_claim_at = time.monotonic() + CLAIM_GATHER_SECONDS
                    elif not claimed:
                        # Nothing may start now: claim again when the first key at rest (a host) may go on,
                        # or after a short while (new jobs, a limit with room again).
                        rest = leases.flow_rest_next_seconds(self.pool)
                        wait_for = rest if rest is not None else IN_FLIGHT_IDLE_SECONDS
                        next_claim_at = time.monotonic() + min(
                            max(wait_for, CLAIM_GATHER_SECONDS), IN_FLIGHT_IDLE_SECONDS
                        )
                        if not running and rest is None and not dispatch.due_jobs(self.pool, cap=1):
                            break
                if not running:
                    if not is_open:
                        break
                    time.sleep(max(next_claim_at - time.monotonic(), 0.001))
                    continue
                timeout = max(next_claim_at - time.monotonic(), 0.001) if is_open else None
                finished, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
                completions = []
                for future in finished:
                    job = running.pop(future)
                    completion, counts = future.result()
                    report.add(counts)
                    if completion is not None:
                        completions.append(completion)
                    else:
                        self._unhold(job.id)
                if completions:
                    # The ends of the jobs that finished together, in one fenced statement.
                    self._complete(completions, report)
                    for completion in completions:
                        self._unhold(completion.job_id)
                    completions = []
                if finished:
                    # A job that ended frees its key (a host with one page in flight): claim again soon.
                    next_claim_at = min(next_claim_at, time.monotonic() + CLAIM_GATHER_SECONDS)
        finally:
            # Left with jobs in hand (the database went away while their ends were written): they are
            # no longer heartbeated, so their leases run out and the reaper hands them back.
            for job_id in [job.id for job in running.values()] + [c.job_id for c in completions]:
                self._unhold(job_id)

    def _run_in_thread(
        self, job: leases.ClaimedJob, context: JobContext
    ) -> tuple[leases.Completion | None, WakeupReport]:
        """One job in a thread of its own: what ``_run_batch`` does for one job, with the thread's own
        database connection (Django's are per thread) and its own counts."""
        counts = WakeupReport()
        if time.monotonic() >= getattr(_job_thread, "connection_checked_until", 0.0):
            close_old_connections()  # a connection past its age or broken is replaced between jobs
            _job_thread.connection_checked_until = time.monotonic() + CONNECTION_CHECK_SECONDS
        if lifecycle.is_draining():
            self._release(job, "pool shutting down", counts)
            return None, counts
        with self._attempt_scope(job, context):
            try:
                return self._run_one(job, context, counts), counts
            except Exception:
                # The runtime's own write failed (the database away): the job keeps its lease until the
                # reaper hands it back; this thread and the others go on.
                logger.exception("job %s could not be ended; its lease runs out and it is handed back", job.id)
                return None, counts

    def _shared_now(self) -> dict:
        """What the jobs in flight share (JobContext.shared: robots.txt files, sources), renewed every
        SHARED_SECONDS: long enough to spare most reads, short enough that a source switched off or
        a robots.txt read again is seen soon (each robots.txt file also keeps its own expiry)."""
        if time.monotonic() >= self._shared_until:
            self._shared, self._shared_until = {}, time.monotonic() + SHARED_SECONDS
        return self._shared

    def _unhold(self, job_id) -> None:
        with self.held_lock:
            self.held.pop(job_id, None)
        self._unmet.pop(job_id, None)

    def batch_size(self) -> int:
        """How many jobs one claim takes: enough to fill the batch budget at the measured run time."""
        if self.seconds_per_job is None:
            return 1
        fitting = options.current().batch_budget_seconds / max(self.seconds_per_job, 1e-4)
        return max(1, min(options.current().max_batch, int(fitting)))

    def _run_batch(self, claimed: list[leases.ClaimedJob], report: WakeupReport) -> None:
        # Every job of the batch is in hand from its claim until its result is written, so the
        # heartbeat thread keeps the leases of those still waiting their turn alive too.
        shared: dict = {}  # what the batch's jobs share (JobContext.shared)
        self._meet(claimed)
        contexts = {job.id: self._context(job, shared) for job in claimed}
        with self.held_lock:
            for job in claimed:
                if job.type in self.types:
                    self.held[job.id] = Held(job, self.types[job.type], contexts[job.id])
        try:
            completions: list[leases.Completion] = []
            for index, job in enumerate(claimed):
                if lifecycle.is_draining():
                    # Shutting down: hand the rest back at once, so another worker takes them now.
                    for rest in claimed[index:]:
                        self._release(rest, "pool shutting down", report)
                    break
                if job.attempt > 1 and completions:
                    # A job run before may be what ended this batch's last worker: the results of the
                    # jobs ahead of it are written first, so another death cannot make them run again.
                    self._complete(completions, report)
                    completions = []
                context = contexts[job.id]
                with self._attempt_scope(job, context):
                    completion = self._run_one(job, context, report)
                if completion is not None:
                    completions.append(completion)
            self._complete(completions, report)
        finally:
            for job in claimed:
                self._unhold(job.id)

    @contextmanager
    def _attempt_scope(self, job: leases.ClaimedJob, context: JobContext) -> Iterator[None]:
        """What surrounds one attempt, in a batch or in a thread of its own: every line written while
        it runs names the job (jobs/logs.py), whichever module writes it, and its warnings (and its
        type's info lines) are kept with the attempt. Its trace is current while it runs, as its
        attempt's span when traces are recorded (its children are created in it: jobs/tracing.py)."""
        job_type = self.types.get(job.type)
        with (
            logs.bound(
                job_id=str(job.id),
                attempt=job.lease_version,
                job_type=job.type,
                correlation_id=job.correlation_id,
                trace_id=tracing.trace_id(job.trace_parent),
            ),
            tracing.attempt(job, pool=self.pool, retry_of=self._retry_of(job)) as context.trace_span,
            logs.kept(job_type.log_info_lines if job_type else 0) as context.kept_lines,
        ):
            yield

    @staticmethod
    def _retry_of(job: leases.ClaimedJob) -> str | None:
        """For a retry, the span of the attempt it retries ('' without one); None for a first attempt
        or the claim after a release. Read only when traces are recorded (jobs/tracing.py)."""
        if job.lease_version > 1 and tracing.enabled():
            return leases.attempt_retried(job.id, job.lease_version)
        return None

    def _complete(self, completions: list[leases.Completion], report: WakeupReport) -> None:
        for outcome in leases.complete_many(completions, actor=self.worker.lease_owner):
            if isinstance(outcome, Exception):
                report.refused += 1
                logger.warning("completion refused: %s", outcome)
            else:
                report.completed += 1
                self.jobs_done += 1

    def _context(self, job: leases.ClaimedJob, shared: dict) -> JobContext:
        return JobContext(
            job_id=job.id,
            job_type=job.type,
            correlation_id=job.correlation_id,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            lease_version=job.lease_version,
            payload=job.payload,
            priority=job.priority,
            _spawn=_spawn,
            _spawn_many=_spawn_many,
            shared=shared,
        )

    def _run_one(self, job: leases.ClaimedJob, context: JobContext, report: WakeupReport) -> leases.Completion | None:
        job_type = self.types.get(job.type)
        if job_type is None:
            unmet = self._unmet.pop(job.id, None) or UnknownJobType(job.type, sorted(self.types))
            if isinstance(unmet, Deferred):  # e.g. a task's module not deployed on this host yet
                self._defer(job, context, unmet, report)
            else:
                kind = ErrorKind.PERMANENT if isinstance(unmet, UnknownJobType) else classify(unmet)
                self._fail(job, context, kind, error_class_name(unmet), str(unmet), 0, report)
            return None
        if context.should_stop():  # its lease was lost while it waited for its turn
            return self._interrupted(job, context, report)
        if self.in_flight > 1:
            # Many handlers run at once: the slot says so for all of them (_wake), and the registry
            # shows no single current job.
            return self._call(job, job_type, context, report)
        self.current_job_id = job.id
        lifecycle.running_job_set(job.id)  # if this process dies now, its supervisor knows whose handler ran
        completion = self._call(job, job_type, context, report)
        # Cleared only once the handler's end is accounted for: if the process goes down on the way (a
        # signal, a failed report), its supervisor still counts the death against this job.
        lifecycle.running_job_set(None)
        self.current_job_id = None
        return completion

    def _call(self, job, job_type, context, report) -> leases.Completion | None:
        """Run the handler and turn how it ended into a completion (or a failure or release written)."""
        started = time.monotonic()
        try:
            with time_limit(job_type.timeout_seconds):
                outcome = job_type.handler(context)
            if time.monotonic() - started > job_type.timeout_seconds:
                # In a thread no alarm interrupts the handler (the heartbeat asked it to stop and let
                # its lease run out): an end past the timeout is the timeout's.
                raise JobTimeout(f"the handler ran past its timeout of {job_type.timeout_seconds:g} s")
        except Interrupted:
            return self._interrupted(job, context, report)
        except Deferred as deferred:
            self._defer(job, context, deferred, report)
            return None
        except KeyboardInterrupt:
            raise  # a signal to the process, not the handler's doing: the process ends as it asked
        except BaseException as exc:
            # The handler's failure, classified; the engine decides what follows. ``SystemExit`` (a
            # library's sys.exit()) too: it ends this job, not the worker process and its batch-mates.
            kind = classify(exc)
            delay = job_type.retry.delay(job.attempt)
            retry_after = _seconds(getattr(exc, "retry_after", None))
            if retry_after is not None:
                delay = min(max(retry_after, 0.0), job_type.retry.cap_seconds)
            self._fail(job, context, kind, error_class_name(exc), str(exc) or repr(exc), delay, report)
            return None
        finally:
            self._measure(time.monotonic() - started)
        return self._outcome(job, context, outcome, report)

    def _outcome(self, job, context, outcome, report) -> leases.Completion | None:
        tracing.attempt_outcome(type(outcome).__name__.lower())
        if isinstance(outcome, Stored):
            return leases.Completion(
                job.id,
                job.lease_version,
                outcome.result_ref,
                outcome.result_checksum,
                recheck=outcome.recheck,
                steps=tuple(context.take_steps()),
                notes=context.notes(),
            )
        if isinstance(outcome, Done):
            return leases.Completion(
                job.id,
                job.lease_version,
                outcome.result_ref,
                outcome.result_checksum,
                settled=outcome.reason or "done",
                steps=tuple(context.take_steps()),
                notes=context.notes(),
            )
        if isinstance(outcome, Skipped):
            return leases.Completion(
                job.id,
                job.lease_version,
                settled=f"skipped: {outcome.reason}"[:500],
                skipped=True,
                steps=tuple(context.take_steps()),
                notes=context.notes(),
            )
        if isinstance(outcome, NeedsReview):
            self._fail(job, context, ErrorKind.UNCLEAR, "NeedsReview", outcome.reason, 0, report)
            return None
        self._fail(
            job,
            context,
            ErrorKind.PERMANENT,
            "InvalidOutcome",
            f"handler returned {outcome!r}; expected Stored, Done, Skipped or NeedsReview",
            0,
            report,
        )
        return None

    def _defer(self, job, context, deferred: Deferred, report) -> None:
        """Hand the job back for later, using no retry budget — unless it was created longer ago than
        the deferred jobs' useful life: without an end, a job could wait for good."""
        if _past_useful_life(job.id):
            hours = options.current().deferred_life_hours
            reason = f"deferred past its useful life ({hours:g} h, LEITSTAND_DEFERRED_LIFE_HOURS): {deferred}"
            error_class = deferred.past_life_class or error_class_name(deferred)
            self._fail(job, context, ErrorKind.PERMANENT, error_class, reason, 0, report)
            return
        self._flush_steps(job, context, report)
        delay = _seconds(deferred.retry_after) or 0.0
        self._release(job, f"deferred: {deferred}", report, delay=delay, context=context)

    def _interrupted(self, job, context, report) -> None:
        if context.stop_reason == TIMED_OUT:
            timeout = self.types[job.type].timeout_seconds
            delay = self.types[job.type].retry.delay(job.attempt)
            message = f"the handler ran past its timeout of {timeout:g} s"
            self._fail(job, context, ErrorKind.TRANSIENT, error_class_name(JobTimeout(message)), message, delay, report)
        elif context.stop_reason.startswith("lease lost"):
            report.refused += 1  # nothing may be written: another attempt or an operator owns the job
        else:
            self._release(job, context.stop_reason, report, context=context)

    def _fail(self, job, context, kind, error_class, message, delay, report) -> None:
        # One line per failed attempt (its job bound to it: jobs/logs.py); the message as a quoted
        # one-line text, cut to 500 characters: it may come from a hostile page. An unclear outcome is
        # the business asking a person, not a fault: a line of its own, at INFO.
        if kind is ErrorKind.UNCLEAR:
            logger.info("attempt needs a person (unclear): %s: %.500r", error_class, message)
            tracing.attempt_outcome("unclear")
        else:
            logger.warning("attempt failed (%s): %s: %.500r", kind.value, error_class, message)
            tracing.attempt_outcome(f"failed ({kind.value})", error_class=error_class)
        self._flush_steps(job, context, report)
        if self._write_or_count_refusal(
            report,
            "failure report",
            lambda: leases.fail(
                job.id,
                job.lease_version,
                actor=self.worker.lease_owner,
                kind=kind,
                error_class=error_class,
                message=message,
                retry_delay_seconds=delay,
                notes=context.notes(),
            ),
        ):
            report.failed += 1

    def _release(self, job, reason, report, delay: float = 0.0, context: JobContext | None = None) -> None:
        tracing.attempt_outcome("released")
        if self._write_or_count_refusal(
            report,
            "release",
            lambda: leases.release(
                job.id,
                job.lease_version,
                actor=self.worker.lease_owner,
                reason=reason,
                delay_seconds=delay,
                notes=context.notes() if context is not None else leases.NO_NOTES,
            ),
        ):
            report.released += 1

    @staticmethod
    def _write_or_count_refusal(report, what: str, write) -> bool:
        """A refused write is expected (another attempt or an operator owns the job): count it."""
        try:
            write()
            return True
        except (leases.StaleAttempt, TransitionNotAllowed) as refused:
            report.refused += 1
            logger.warning("%s refused: %s", what, refused)
            return False

    def _flush_steps(self, job, context, report) -> bool:
        try:
            leases.steps_record(job.id, job.lease_version, context.take_steps())
            return True
        except leases.StaleAttempt as refused:
            report.refused += 1
            logger.warning("step events refused: %s", refused)
            return False

    def _measure(self, seconds: float) -> None:
        # An exponential moving average reacts within a few jobs when the run time changes.
        self.seconds_per_job = seconds if self.seconds_per_job is None else 0.8 * self.seconds_per_job + 0.2 * seconds

    # --- the heartbeat thread -------------------------------------------------------------

    def start(self) -> None:
        """Start the heartbeat thread, which also registers this worker process."""
        self._ensure_heartbeat_thread()

    def _ensure_heartbeat_thread(self) -> None:
        if self._heartbeat_thread is None or not self._heartbeat_thread.is_alive():
            self._heartbeat_thread = threading.Thread(
                target=self._heartbeat_loop, name=f"heartbeat-{self.pool}", daemon=True
            )
            self._heartbeat_thread.start()

    def close(self) -> None:
        """Stop the heartbeat thread (the process is about to end, or a test is done with the runtime)."""
        self._closed.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        if self._executor is not None:
            self._executor_close()
        PoolRuntime._by_pool.pop((os.getpid(), self.pool), None)

    def _executor_close(self) -> None:
        """End the job threads, each closing its own database connection (Django's are per thread):
        one closing task per thread, held at a barrier so that no thread takes two."""
        barrier = threading.Barrier(self.in_flight)

        def close_mine() -> None:
            try:
                barrier.wait(timeout=5)
            except threading.BrokenBarrierError:
                pass
            connection.close()

        for _ in range(self.in_flight):
            self._executor.submit(close_mine)
        self._executor.shutdown(wait=True)
        self._executor = None

    def _heartbeat_loop(self) -> None:
        """Supervised: an error in one round is logged and the next round follows."""
        next_registry_update = 0.0
        outage = logs.Outage(logger, f"heartbeat round of {self.pool} worker {os.getpid()}")
        wait = HEARTBEAT_ROUND_SECONDS
        try:
            while not self._closed.wait(wait):
                try:
                    self._heartbeat_round()
                    # Live means the loop that takes work is alive (in a wake-up, or waiting for one),
                    # not merely this thread: a worker whose loop froze stops looking live.
                    if (
                        time.monotonic() >= next_registry_update
                        and not self._stop_recorded
                        and (self.in_wakeup or lifecycle.loop_is_alive(within=LOOP_STALE_SECONDS))
                    ):
                        self._registry_update()
                        next_registry_update = time.monotonic() + 5
                    outage.succeeded()
                    wait = HEARTBEAT_ROUND_SECONDS
                except Exception as failure:
                    # Logged once per outage, then backed off (a database away for ten minutes once
                    # wrote 134,495 lines from one idle pool); the rounds back off too.
                    wait = outage.failed(failure)
                    close_old_connections()
        finally:
            connection.close()  # this thread's own connection

    def _heartbeat_round(self) -> None:
        is_draining = lifecycle.is_draining()
        if is_draining and not self._stop_recorded:
            # The registry says so at once: consoles and alerts must not count a draining process.
            WorkerProcess.objects.filter(
                host=self.worker.host, pid=self.worker.pid, pool=self.pool, stopped_at__isnull=True
            ).update(stopped_at=LeitstandNow(), stop_reason="SIGTERM: the pool is shutting down")
            self._stop_recorded = True
        with self.held_lock:
            in_hand = list(self.held.values())
        for held in in_hand:
            if is_draining:
                held.context.request_stop("pool shutting down")
            if self.in_flight > 1 and time.monotonic() - held.since > held.job_type.timeout_seconds:
                # No alarm interrupts a handler in a thread: it is asked to stop, and its lease is no
                # longer extended, so it runs out and the job is handed back (its late writes fenced off).
                held.context.request_stop(TIMED_OUT)
                continue
            if time.monotonic() - held.last_heartbeat < held.job_type.heartbeat_seconds:
                continue
            try:
                leases.steps_record(held.job.id, held.job.lease_version, held.context.take_steps())
                leases.heartbeat(held.job.id, held.job.lease_version, lease_seconds=held.job_type.lease_seconds)
                held.last_heartbeat = time.monotonic()
            except leases.StaleAttempt as refused:
                held.context.request_stop(f"lease lost: {refused}")

    def _registry_update(self) -> None:
        process = self._process = getattr(self, "_process", None) or psutil.Process()
        rss = process.memory_info().rss
        values = {
            "last_seen_at": LeitstandNow(),
            "current_job_id": self.current_job_id,
            "rss_bytes": rss,
            "cpu_percent": process.cpu_percent(interval=None),
            "disk_free_bytes": psutil.disk_usage(str(options.current().base_dir)).free,
            "jobs_done": self.jobs_done,
            "wakeups": self.wakeups,
            "duplicate_wakeups": self.duplicate_wakeups,
        }
        mine = WorkerProcess.objects.filter(
            host=self.worker.host, pid=self.worker.pid, pool=self.pool, stopped_at__isnull=True
        )
        if not mine.update(**values):  # first refresh, or the row was removed meanwhile
            WorkerProcess.objects.create(host=self.worker.host, pid=self.worker.pid, pool=self.pool, **values)


def _spawn(**kwargs):
    return job_submit(actor="spawn", **kwargs).job.id


def _spawn_many(children: list[dict], **parent) -> list[Spawned]:
    return [Spawned(s.job_id, s.created, s.conflict, s.refused) for s in jobs_spawn_many(children, **parent)]
