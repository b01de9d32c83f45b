"""What a handler sees: a context object and the outcomes it may return.

A handler never gets the ORM row nor a way to write state: it reads its payload and IDs from the
context, records steps, applies at-most-once effects, spawns child jobs, checks ``should_stop()``,
and returns an outcome (or raises a classified error from ``jobs.errors``). The engine turns the
outcome into a fenced transition.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.utils import timezone

from jobs import leases, logs, tracing
from jobs.effects import effect_apply_once
from jobs.errors import Deferred

logger = logging.getLogger("leitstand.handler")


# --- outcomes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """Executed; the result is stored under ``result_ref``. ``recheck``: a follow-up decides."""

    result_ref: str = ""
    result_checksum: str = ""
    recheck: bool = False


@dataclass(frozen=True)
class Done:
    """Executed, and the handler's own business rule decided the outcome: the job ends ``done``
    with ``reason`` (analysis: clear no-match; crawl: candidates recorded and handed on)."""

    reason: str
    result_ref: str = ""
    result_checksum: str = ""


@dataclass(frozen=True)
class NeedsReview:
    """The handler ran but cannot decide the business question: a person must."""

    reason: str


@dataclass(frozen=True)
class Skipped:
    """There was nothing to do (e.g. robots.txt forbids the page): the job ends ``done`` with the reason."""

    reason: str


Outcome = Stored | Done | NeedsReview | Skipped


class Interrupted(Exception):
    """Raised by ``context.check_stop()``: the job must end now (shutdown, lease lost, deadline)."""


@dataclass(frozen=True)
class Child:
    """A child job for ``JobContext.spawn_many``."""

    job_type: str
    payload: dict
    key: str
    priority: int | None = None
    source: str = ""
    subject: str = ""  # what the child is about, when the spawner knows it (else read from its payload)


@dataclass(frozen=True)
class Spawned:
    """What became of one child: its job, whether it was created now (False: the same request was
    spawned before), or why nothing was created: its key names a different request (``conflict``) or
    its checks refused it (``refused``)."""

    job_id: UUID | None  # None: refused
    created: bool
    conflict: bool = False
    refused: str = ""  # why the child's checks refused it (nothing was created); '' when they did not


# --- the context --------------------------------------------------------------------------------


@dataclass
class JobContext:
    job_id: UUID
    job_type: str
    correlation_id: str
    attempt: int
    max_attempts: int
    lease_version: int
    payload: dict
    priority: int
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _stop_reason: str = field(default="", repr=False)
    _steps: list[leases.Step] = field(default_factory=list, repr=False)
    _steps_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _spawn: Callable[..., Any] | None = field(default=None, repr=False)
    _spawn_many: Callable[..., Any] | None = field(default=None, repr=False)
    # Replaces the effect ledger (dry runs and shadow runs record what would be applied).
    _effect: Callable[..., Any] | None = field(default=None, repr=False)
    # What the jobs of one claimed batch share (the same dictionary in each of their contexts): reads
    # a type may make once per batch instead of once per job (the pipeline's robots.txt files and
    # originals). Keys are the type's own; a context of its own has one of its own.
    shared: dict = field(default_factory=dict, repr=False)
    # What the attempt keeps beside its outcome (set by the runtime while it runs): its span's
    # traceparent and the log lines kept (jobs/tracing.py, jobs/logs.py).
    trace_span: str = field(default="", repr=False)
    kept_lines: logs.Kept | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.log = logging.LoggerAdapter(
            logger,
            {
                "job_id": str(self.job_id),
                "correlation_id": self.correlation_id,
                "attempt": self.lease_version,
            },
        )

    # Stopping -------------------------------------------------------------------------------

    def should_stop(self) -> bool:
        """True once the job must end: its lease was lost, the pool is shutting down, or time ran out."""
        return self._stop.is_set()

    def check_stop(self) -> None:
        if self._stop.is_set():
            raise Interrupted(self._stop_reason)

    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    @property
    def stop_reason(self) -> str:
        return self._stop_reason

    # Steps ----------------------------------------------------------------------------------

    @contextmanager
    def step(self, name: str, **data: Any) -> Iterator[dict]:
        """Record a structured step: ``with ctx.step("fetch", url=u) as info: info["status"] = 200``.

        The step's outcome is ``failed`` when its block raises, ``deferred`` when it defers the job
        (``jobs.errors.Deferred``: a busy or resting host, not a failure), else ``ok`` (or ``skipped``
        when the block sets ``info["skipped"] = True``, ``unchanged`` when it sets ``info["unchanged"] =
        True``: a conditional request answered 304). Events are written with the next heartbeat or the
        job's result, fenced by the lease.
        """
        started_wall, started = timezone.now(), time.monotonic()
        info: dict[str, Any] = dict(data)
        outcome = "ok"
        # With traces recorded, the step is a span inside its attempt's (jobs/tracing.py), with its outcome.
        with tracing.span(f"step {name}", attributes={"leitstand.step": name}, quiet=(Deferred,)) as span:
            try:
                yield info
            except Deferred as exc:
                outcome = "deferred"
                info["deferred"] = str(exc)[:500]
                raise
            except BaseException as exc:
                outcome = "failed"
                info["error"] = f"{type(exc).__name__}: {exc}"[:500]
                raise
            finally:
                if info.pop("skipped", False) and outcome == "ok":
                    outcome = "skipped"
                if info.pop("unchanged", False) and outcome == "ok":
                    outcome = "unchanged"
                if span is not None:
                    span.set_attribute("leitstand.step.outcome", outcome)
                with self._steps_lock:
                    self._steps.append(
                        leases.Step(
                            step=name,
                            outcome=outcome,
                            started_at=started_wall,
                            duration_ms=(time.monotonic() - started) * 1000,
                            data=info,
                        )
                    )

    def notes(self) -> leases.AttemptNotes:
        """The attempt's span and the log lines it kept so far, for the write that ends it."""
        return leases.AttemptNotes(self.trace_span, self.kept_lines.stored() if self.kept_lines else None)

    def take_steps(self) -> list[leases.Step]:
        with self._steps_lock:
            steps, self._steps = self._steps, []
        return steps

    # Effects and children -----------------------------------------------------------------

    def effect(self, key: str, apply: Callable[[], Any], *, kind: str = "effect") -> Any:
        """Apply ``apply()`` at most once per ``key`` (across attempts); returns its (recorded) result."""
        if self._effect is not None:
            return self._effect(key, apply, kind=kind)
        return effect_apply_once(
            key=key, kind=kind, apply=apply, job_id=self.job_id, lease_version=self.lease_version
        ).value

    def spawn(self, job_type: str, payload: dict, *, key: str, priority: int | None = None, source: str = "") -> UUID:
        """Create a child job (idempotent per ``key``) that carries this job as parent and its correlation ID."""
        if self._spawn is None:
            raise RuntimeError("this context cannot spawn jobs")
        return self._spawn(
            job_type=job_type,
            payload=payload,
            idempotency_key=key,
            priority=priority,
            parent_id=self.job_id,
            parent_lease_version=self.lease_version,
            correlation_id=self.correlation_id,
            source=source,
        )

    def spawn_many(self, children: list[Child]) -> list[Spawned]:
        """Create many children in one statement and one transaction (each idempotent per key, as with
        ``spawn``). A child whose key names a different request is answered with ``conflict`` set,
        one its checks refuse (a payload or key out of bounds) with ``refused`` saying why, instead of
        raising: the others are still created."""
        if self._spawn_many is None:
            raise RuntimeError("this context cannot spawn jobs")
        if not children:
            return []
        return self._spawn_many(
            [
                {
                    "job_type": c.job_type,
                    "payload": c.payload,
                    "idempotency_key": c.key,
                    "priority": c.priority,
                    "source": c.source,
                    "subject": c.subject,
                }
                for c in children
            ],
            parent_id=self.job_id,
            parent_lease_version=self.lease_version,
            correlation_id=self.correlation_id,
        )
