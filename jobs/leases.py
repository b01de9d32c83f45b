"""Every write to a job's state and lease columns happens here.

A claim is one statement: a ``FOR UPDATE SKIP LOCKED`` selection feeding an ``UPDATE … RETURNING``
that moves jobs to ``reserved``, raises their lease version (the attempt ID and fencing token) and
records an attempt and a transition. Every later write by that worker — start, heartbeat, progress,
complete, fail, release — is one statement guarded in its WHERE clause by the lease version and
the allowed source states, which are read from the django-fsm declaration in ``jobs.models``.
When the guard matches no row, the same statement records the refusal (a ``StaleWrite`` row and a
count on the stale attempt) and the caller gets ``StaleAttempt``: a late or zombie worker can never
overwrite a newer attempt's work, and nothing is silently ignored.

Lease and schedule arithmetic uses ``leitstand_now()`` (database time), never this process's clock.
Human and API transitions (cancel, confirm, decide, retry now) go through ``transition_apply``,
which runs the django-fsm method itself under a row lock and checks its permission.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

import psycopg
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django_fsm import TransitionNotAllowed, can_proceed, has_transition_perm
from psycopg.types.json import Jsonb
from psycopg.types.string import StrDumper

from jobs.errors import ErrorKind
from jobs.models import LEASED_STATES, Attempt, Job, LeitstandNow, State
from jobs.models import Transition as TransitionRecord
from jobs.retry import RetryPolicy


class JobNotFound(LookupError):
    def __init__(self, job_id: UUID | str) -> None:
        super().__init__(f"job {job_id} does not exist")
        self.job_id = job_id


class StaleAttempt(Exception):
    """The writer's attempt no longer holds the job's lease; its write was refused and recorded.

    A handler that receives this must stop: another attempt (or an operator) owns the job now.
    """

    def __init__(self, *, job_id, lease_version: int, operation: str, current_lease_version: int, current_state: str):
        super().__init__(
            f"{operation} by attempt {lease_version} of job {job_id} refused: the job is {current_state} "
            f"at lease version {current_lease_version}"
        )
        self.job_id = job_id
        self.lease_version = lease_version
        self.operation = operation
        self.current_lease_version = current_lease_version
        self.current_state = current_state


@dataclass(frozen=True)
class WorkerIdentity:
    host: str
    pid: int
    pool: str = ""

    @property
    def lease_owner(self) -> str:
        return f"{self.host}:{self.pid}" + (f"/{self.pool}" if self.pool else "")

    @classmethod
    def of_this_process(cls, pool: str = "") -> WorkerIdentity:
        return cls(host=socket.gethostname(), pid=os.getpid(), pool=pool)


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker holds after a claim: enough to run the handler and fence every write."""

    id: UUID
    type: str
    lease_version: int
    attempt: int
    max_attempts: int
    payload: dict
    correlation_id: str
    priority: int
    schema_version: int
    lease_expires_at: datetime


@dataclass(frozen=True)
class WriteResult:
    job_id: UUID
    from_state: str
    to_state: str
    lease_version: int


@cache
def sources_of(*transition_names: str) -> tuple[str, ...]:
    """The source states that the django-fsm declaration allows for these transitions, for SQL guards."""
    field = Job._meta.get_field("state")
    found = {t.name: set() for t in field.get_all_transitions(Job)}
    for t in field.get_all_transitions(Job):
        found[t.name].add(t.source)
    unknown = [name for name in transition_names if name not in found]
    if unknown:
        raise LookupError(f"no such job transition: {', '.join(unknown)}")
    return tuple(sorted(set().union(*(found[name] for name in transition_names))))


@cache
def target_of(transition_name: str) -> str:
    field = Job._meta.get_field("state")
    targets = {t.target for t in field.get_all_transitions(Job) if t.name == transition_name}
    if len(targets) != 1:
        raise LookupError(f"transition {transition_name} has no single target: {targets}")
    return targets.pop()


@contextmanager
def _server_bound_cursor() -> Iterator[psycopg.Cursor]:
    """A cursor with server-side parameter binding on Django's connection (same session and
    transaction). Django's own cursors bind on the client, which spends more time quoting the
    arrays of a batch as SQL literals than PostgreSQL spends executing the statement; errors still
    pass through Django's wrapper, so they arrive as django.db exceptions and mark the connection."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        # Strings go as text (not "unknown"), so one parameter may serve several places.
        cursor.adapters.register_dumper(str, StrDumper)
        yield cursor


def _text(value: str, limit: int) -> str:
    """Text from handlers may come from hostile pages: PostgreSQL refuses NUL, so it is replaced."""
    return value.replace("\x00", "\ufffd")[:limit]


def _without_nul(value):
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(str(k)): _without_nul(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_nul(v) for v in value]
    return value


def _dumps(value) -> str:
    # Handler data may hold values JSON cannot (datetimes, UUIDs, Decimals): recorded as their text;
    # jsonb refuses the NUL character, which hostile pages put anywhere.
    return json.dumps(_without_nul(value), default=lambda v: _without_nul(str(v)))


def _as_uuid(job_id) -> UUID:
    if isinstance(job_id, UUID):
        return job_id
    try:
        return UUID(str(job_id))
    except ValueError:
        raise JobNotFound(job_id) from None


def _fetch_one(sql: str, params: dict[str, Any]) -> tuple:
    with _server_bound_cursor() as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()


def _fetch_all(sql: str, params: dict[str, Any]) -> list[tuple]:
    with _server_bound_cursor() as cursor:
        # Prepared once per connection: these statements run thousands of times, and planning a
        # CTE of this size costs more than executing it for a small batch.
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall()


# --- creation -----------------------------------------------------------------------------------

_INSERT_SQL = """
WITH created AS (
    INSERT INTO jobs_job (id, type, pool, idempotency_key, correlation_id, parent_id, batch_id, schema_version,
                          priority, source, payload, max_attempts, due_at, state)
    VALUES (%(id)s, %(type)s, %(pool)s, %(idempotency_key)s, %(correlation_id)s, %(parent_id)s, %(batch_id)s,
            %(schema_version)s, %(priority)s, %(source)s, %(payload)s, %(max_attempts)s,
            coalesce(%(due_at)s, leitstand_now()), %(state)s)
    ON CONFLICT (type, idempotency_key) DO NOTHING
    RETURNING id, state, lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT id, '', state, leitstand_now(), lease_version, 'created', %(actor)s FROM created
)
SELECT id FROM created
"""


def insert_planned(*, payload: dict, actor: str, **columns) -> bool:
    """Insert a job in its initial state with its creation transition, unless its
    (type, idempotency key) exists. True if inserted. Input is validated by ``jobs.services``."""

    initial = Job._meta.get_field("state").default
    parent_id = columns.pop("parent_id", None)
    row = _fetch_one(
        _INSERT_SQL,
        {
            "batch_id": None,
            **columns,
            "parent_id": _as_uuid(parent_id) if parent_id else None,
            "payload": Jsonb(payload),
            "state": initial,
            "actor": actor[:255],
        },
    )
    return row is not None


# --- claim ------------------------------------------------------------------------------------

_CLAIM_SQL = """
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
picked AS MATERIALIZED (
    -- An ordered scan of job_claim_idx (pool, priority, due_at, id) that stops after LIMIT rows.
    -- SKIP LOCKED: concurrent claimers take different jobs instead of waiting for each other.
    -- MATERIALIZED: the locking selection must run exactly once.
    SELECT j.id FROM jobs_job AS j
    WHERE j.state = %(source)s AND j.pool = %(pool)s AND j.due_at <= (SELECT now FROM clock)
    ORDER BY j.priority, j.due_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
type_settings AS (
    SELECT * FROM unnest(%(types)s::text[], %(leases)s::float8[], %(versions)s::text[])
        AS t(type, lease_seconds, processing_version)
),
claimed AS (
    UPDATE jobs_job AS j
    SET state = %(final)s, lease_version = j.lease_version + 1, attempts = j.attempts + 1,
        lease_owner = %(owner)s,
        lease_expires_at = clock.now + coalesce(
            (SELECT t.lease_seconds FROM type_settings AS t WHERE t.type = j.type), %(default_lease)s
        ) * interval '1 second',
        heartbeat_at = clock.now, state_changed_at = clock.now, next_attempt_at = NULL,
        processing_version = CASE WHEN %(start)s THEN coalesce(
            (SELECT t.processing_version FROM type_settings AS t WHERE t.type = j.type), j.processing_version
        ) ELSE j.processing_version END
    FROM picked, clock
    WHERE j.id = picked.id
    RETURNING j.id, j.type, j.lease_version, j.attempts, j.max_attempts, j.payload, j.correlation_id,
              j.priority, j.schema_version, j.lease_expires_at, j.due_at
),
attempt AS (
    INSERT INTO jobs_attempt (job_id, lease_version, job_type, lease_owner, worker_host, worker_pid, pool, claimed_at,
                              started_at, heartbeat_at, outcome, error_class, error_message, refused_writes,
                              last_refused_op)
    SELECT claimed.id, claimed.lease_version, claimed.type, %(owner)s, %(host)s, %(pid)s, %(pool)s, clock.now,
           CASE WHEN %(start)s THEN clock.now END, clock.now, '', '', '', 0, ''
    FROM claimed, clock
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT claimed.id, %(source)s, %(target)s, clock.now, claimed.lease_version, 'claimed', %(owner)s
    FROM claimed, clock
    UNION ALL
    SELECT claimed.id, %(target)s, %(final)s, clock.now, claimed.lease_version, 'handler started', %(owner)s
    FROM claimed, clock WHERE %(start)s
)
SELECT id, type, lease_version, attempts, max_attempts, payload, correlation_id, priority, schema_version,
       lease_expires_at
FROM claimed ORDER BY priority, due_at, id
"""


def claim(
    *,
    pool: str,
    worker: WorkerIdentity,
    lease_seconds: float | Mapping[str, float],
    limit: int = 1,
    start: bool = False,
    processing_versions: Mapping[str, str] | None = None,
) -> list[ClaimedJob]:
    """Reserve up to ``limit`` due jobs of one pool, most urgent lane first, then oldest due.

    ``lease_seconds`` is one duration, or one per job type (types not named get the longest).
    With ``start=True`` the jobs also begin at once (reserved → running, both transitions logged,
    ``processing_versions`` recorded per type): a worker that runs what it claims saves a commit
    per job. Only an equality on the pool lets the claim walk its index in order and stop after
    ``limit`` rows, so a claim serves one pool.
    """
    if limit < 1:
        raise ValueError(f"claim limit must be at least 1, got {limit}")
    leases_by_type = dict(lease_seconds) if isinstance(lease_seconds, Mapping) else {}
    default_lease = max(leases_by_type.values()) if leases_by_type else lease_seconds
    if not default_lease or min([default_lease, *leases_by_type.values()]) <= 0:
        raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
    versions = processing_versions or {}
    types = sorted(set(leases_by_type) | set(versions))
    (source,) = sources_of("claim")
    target = target_of("claim")
    if start and sources_of("start") != (target,):
        raise AssertionError("claim with start assumes start follows claim directly")
    rows = _fetch_all(
        _CLAIM_SQL,
        {
            "source": source,
            "target": target,
            "final": target_of("start") if start else target,
            "start": start,
            "pool": pool,
            "limit": limit,
            "types": types,
            "leases": [float(leases_by_type.get(t, default_lease)) for t in types],
            "versions": [versions.get(t) for t in types],
            "default_lease": default_lease,
            "owner": worker.lease_owner,
            "host": worker.host,
            "pid": worker.pid,
        },
    )
    # Django leaves JSON undecoded on raw cursors (its fields decode it); decode it here.
    return [ClaimedJob(*row[:5], json.loads(row[5]) if isinstance(row[5], str) else row[5], *row[6:]) for row in rows]


# --- fenced writes by the lease holder ---------------------------------------------------------

_FENCED_SQL = """
WITH durability AS MATERIALIZED (SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)),
clock AS MATERIALIZED (SELECT leitstand_now() AS now FROM durability),
target AS (
    SELECT id, state FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(sources)s)
    FOR UPDATE
),
changed AS (
    UPDATE jobs_job AS j SET {job_set}
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.lease_expires_at
),
attempt AS (
    UPDATE jobs_attempt AS a SET {attempt_set}
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
    WHERE changed.from_state <> changed.to_state
),
refused AS (
    -- The guard matched nothing: record the refusal in this same statement, never ignore it.
    INSERT INTO jobs_stalewrite (job_id, lease_version, operation, at, current_lease_version, current_state)
    SELECT j.id, %(lease_version)s, %(operation)s, clock.now, j.lease_version, j.state
    FROM jobs_job AS j, clock
    WHERE j.id = %(job_id)s AND NOT EXISTS (SELECT 1 FROM changed)
    RETURNING current_lease_version, current_state
),
refused_attempt AS (
    UPDATE jobs_attempt AS a
    SET refused_writes = a.refused_writes + 1, last_refused_at = clock.now, last_refused_op = %(operation)s
    FROM clock
    WHERE a.job_id = %(job_id)s AND a.lease_version = %(lease_version)s AND NOT EXISTS (SELECT 1 FROM changed)
)
SELECT EXISTS (SELECT 1 FROM changed),
       (SELECT from_state FROM changed), (SELECT to_state FROM changed), (SELECT lease_expires_at FROM changed),
       (SELECT current_lease_version FROM refused), (SELECT current_state FROM refused)
"""

# Fields every write that ends a lease sets on the job.
_END_LEASE = "lease_owner = '', lease_expires_at = NULL"


def _fenced_write(
    operation: str,
    *,
    job_id: UUID | str,
    lease_version: int,
    sources: tuple[str, ...],
    job_set: str,
    attempt_set: str,
    cause: str,
    actor: str,
    params: dict[str, Any] | None = None,
    is_durable: bool = True,
) -> tuple[WriteResult, datetime | None]:
    sql = _FENCED_SQL.format(job_set=job_set, attempt_set=attempt_set)
    row = _fetch_one(
        sql,
        {
            "job_id": _as_uuid(job_id),
            "lease_version": lease_version,
            "sources": list(sources),
            "operation": operation,
            "cause": _text(cause, 500),
            "actor": actor[:255],
            "synchronous_commit": "on" if is_durable else "off",
            **(params or {}),
        },
    )
    written, from_state, to_state, lease_expires_at, current_version, current_state = row
    if written:
        return WriteResult(_as_uuid(job_id), from_state, to_state, lease_version), lease_expires_at
    if current_state is None:
        raise JobNotFound(job_id)
    raise _refusal(job_id, lease_version, operation, current_version, current_state)


def _refusal(job_id, lease_version: int, operation: str, current_version: int, current_state: str) -> Exception:
    if current_version == lease_version and current_state in LEASED_STATES:
        # The writer still holds the lease but asked for a transition its state does not allow.
        return TransitionNotAllowed(f"{operation} is not allowed for job {job_id} while it is {current_state}")
    return StaleAttempt(
        job_id=job_id,
        lease_version=lease_version,
        operation=operation,
        current_lease_version=current_version,
        current_state=current_state,
    )


def start(job_id, lease_version: int, *, actor: str, processing_version: str = "") -> WriteResult:
    """The handler begins: reserved → running; records the handler version that runs it."""
    result, _ = _fenced_write(
        "start",
        job_id=job_id,
        lease_version=lease_version,
        sources=sources_of("start"),
        job_set="state = %(target)s, state_changed_at = clock.now, "
        "processing_version = coalesce(nullif(%(processing_version)s, ''), j.processing_version)",
        attempt_set="started_at = clock.now",
        cause="handler started",
        actor=actor,
        params={"target": target_of("start"), "processing_version": processing_version},
    )
    return result


def heartbeat(job_id, lease_version: int, *, lease_seconds: float, progress: dict | None = None) -> datetime:
    """Extend the lease from database time; optionally record progress. Returns the new expiry.

    A heartbeat that arrives after the lease expired but before the reaper released it still
    extends the lease: the grace period exists so a worker that is merely slow keeps its job.
    """

    _, expires = _fenced_write(
        "progress" if progress is not None else "heartbeat",
        job_id=job_id,
        lease_version=lease_version,
        sources=LEASED_STATES,
        job_set="heartbeat_at = clock.now, lease_expires_at = clock.now + %(lease)s * interval '1 second', "
        "progress = coalesce(%(progress)s, j.progress)",
        attempt_set="heartbeat_at = clock.now",
        cause="heartbeat",
        actor="",
        params={"lease": lease_seconds, "progress": Jsonb(progress, dumps=_dumps) if progress is not None else None},
        # A heartbeat lost in a database crash costs nothing (the next one comes within seconds), so
        # it does not wait for its WAL flush: half the cost of the most frequent write.
        is_durable=False,
    )
    return expires


def complete(
    job_id,
    lease_version: int,
    *,
    actor: str,
    result_ref: str = "",
    result_checksum: str = "",
    recheck: bool = False,
) -> WriteResult:
    """Executed and result written: running → result_stored (or → recheck_due when a follow-up decides).

    The business outcome is not confirmed by this: ``confirm`` (or a recheck plan) does that later.
    """
    name = "plan_recheck" if recheck else "complete"
    result, _ = _fenced_write(
        name,
        job_id=job_id,
        lease_version=lease_version,
        sources=sources_of(name),
        job_set=f"state = %(target)s, state_changed_at = clock.now, result_ref = %(result_ref)s, "
        f"result_checksum = %(result_checksum)s, {_END_LEASE}",
        attempt_set="finished_at = clock.now, outcome = %(outcome)s",
        cause="result stored" if not recheck else "result stored; recheck planned",
        actor=actor,
        params={
            "target": target_of(name),
            "result_ref": _text(result_ref, 500),
            "result_checksum": result_checksum[:128],
            "outcome": Attempt.Outcome.RECHECK_PLANNED if recheck else Attempt.Outcome.COMPLETED,
        },
    )
    return result


@dataclass(frozen=True)
class Step:
    step: str
    outcome: str
    started_at: datetime  # the worker's wall clock: for display only, never for a lease decision
    duration_ms: float
    data: dict


@dataclass(frozen=True)
class Completion:
    """One job's result in a batch completion, with the step events of its run."""

    job_id: UUID
    lease_version: int
    result_ref: str = ""
    result_checksum: str = ""
    recheck: bool = False
    # Non-empty: the handler's business rule decided the outcome; the job goes on to done (settle).
    settled: str = ""
    steps: tuple[Step, ...] = ()
    # The handler skipped the work (robots.txt forbade it, nothing changed): the attempt's outcome
    # says so; ``settled`` carries the reason for people.
    skipped: bool = False


_COMPLETE_MANY_SQL = """
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
input AS MATERIALIZED (
    -- The batch travels as one JSON document: far cheaper to send than a set of parallel arrays.
    SELECT * FROM jsonb_to_recordset(%(completions)s)
        AS i(id uuid, lease_version bigint, result_ref text, result_checksum text, target text, outcome text,
             cause text, settled text)
),
target AS MATERIALIZED (
    SELECT j.id, j.state, i.result_ref, i.result_checksum, i.target, i.outcome, i.cause, i.settled
    FROM jobs_job AS j JOIN input AS i ON i.id = j.id AND i.lease_version = j.lease_version
    WHERE j.state = ANY(%(sources)s)
    ORDER BY j.id
    FOR UPDATE OF j
),
changed AS (
    UPDATE jobs_job AS j
    SET state = CASE WHEN target.settled IS NULL THEN target.target ELSE %(settled_state)s END,
        state_changed_at = clock.now, result_ref = target.result_ref,
        result_checksum = target.result_checksum, lease_owner = '', lease_expires_at = NULL,
        finished_at = CASE WHEN target.settled IS NULL THEN j.finished_at ELSE clock.now END,
        completion_reason = coalesce(target.settled, j.completion_reason)
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version, j.correlation_id,
              target.outcome, target.cause, target.target AS stored_state, target.settled
),
steps AS (
    -- Step events travel with the result, and are written only for the jobs whose write was entitled.
    INSERT INTO jobs_stepevent (job_id, lease_version, correlation_id, step, outcome, started_at, duration_ms, data)
    SELECT changed.id, changed.lease_version, changed.correlation_id, s.step, s.outcome, s.started_at,
           s.duration_ms, s.data
    FROM ROWS FROM (jsonb_to_recordset(%(steps)s)
             AS (job_id uuid, step text, outcome text, started_at timestamptz, duration_ms float8, data jsonb))
         WITH ORDINALITY AS s(job_id, step, outcome, started_at, duration_ms, data, n)
    JOIN changed ON changed.id = s.job_id
    ORDER BY s.n
),
attempt AS (
    UPDATE jobs_attempt AS a SET finished_at = clock.now, outcome = changed.outcome
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version
),
logged AS (
    -- A settled job logs both steps: the result was stored, then the handler's rule decided it.
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT t.id, t.from_state, t.to_state, clock.now, t.lease_version, t.cause, %(actor)s
    FROM (SELECT changed.id, changed.from_state, changed.stored_state AS to_state, changed.lease_version,
                 changed.cause, 1 AS n
          FROM changed
          UNION ALL
          SELECT changed.id, changed.stored_state, changed.to_state, changed.lease_version, changed.settled, 2
          FROM changed WHERE changed.settled IS NOT NULL
          ORDER BY id, n) AS t, clock
),
refused AS (
    INSERT INTO jobs_stalewrite (job_id, lease_version, operation, at, current_lease_version, current_state)
    SELECT j.id, i.lease_version, 'complete', clock.now, j.lease_version, j.state
    FROM input AS i JOIN jobs_job AS j ON j.id = i.id CROSS JOIN clock
    WHERE NOT EXISTS (SELECT 1 FROM changed WHERE changed.id = i.id)
    RETURNING job_id, lease_version, current_lease_version, current_state
),
refused_attempt AS (
    UPDATE jobs_attempt AS a
    SET refused_writes = a.refused_writes + 1, last_refused_at = clock.now, last_refused_op = 'complete'
    FROM refused, clock
    WHERE a.job_id = refused.job_id AND a.lease_version = refused.lease_version
)
SELECT TRUE, id, from_state, to_state, lease_version, NULL::bigint, NULL::text FROM changed
UNION ALL
SELECT FALSE, job_id, NULL, NULL, lease_version, current_lease_version, current_state FROM refused
"""


def complete_many(completions: list[Completion], *, actor: str) -> list[WriteResult | Exception]:
    """Complete a batch of jobs in one statement, each fenced by its own lease version.

    Returns one entry per completion, in order: a ``WriteResult``, or the refusal (a
    ``StaleAttempt`` or ``TransitionNotAllowed``, recorded like single refusals but not raised, so
    one stale job does not block its batch), or ``JobNotFound``.
    """
    if len({c.job_id for c in completions}) != len(completions):
        raise ValueError("a batch completion names a job more than once")
    if not completions:
        return []
    assert sources_of("complete") == sources_of("plan_recheck"), "batch completion assumes one source set"
    assert sources_of("settle") == (target_of("complete"),), "settling follows storing the result"
    if any(c.settled and c.recheck for c in completions):
        raise ValueError("a completion cannot both plan a recheck and settle the outcome")
    if any(c.skipped and not c.settled for c in completions):
        raise ValueError("a skipped completion settles the outcome: give its reason in settled")
    rows = _fetch_all(
        _COMPLETE_MANY_SQL,
        {
            "completions": Jsonb(
                [
                    {
                        "id": str(_as_uuid(c.job_id)),
                        "lease_version": c.lease_version,
                        "result_ref": _text(c.result_ref, 500),
                        "result_checksum": c.result_checksum[:128],
                        "target": target_of("plan_recheck" if c.recheck else "complete"),
                        "outcome": (
                            Attempt.Outcome.SKIPPED
                            if c.skipped
                            else Attempt.Outcome.RECHECK_PLANNED
                            if c.recheck
                            else Attempt.Outcome.COMPLETED
                        ),
                        "cause": "result stored; recheck planned" if c.recheck else "result stored",
                        "settled": _text(c.settled, 500) or None,
                    }
                    for c in completions
                ],
                dumps=_dumps,
            ),
            "steps": Jsonb(
                [
                    {
                        "job_id": str(c.job_id),
                        "step": _text(step.step, 100),
                        "outcome": step.outcome,
                        "started_at": step.started_at.isoformat(),
                        "duration_ms": step.duration_ms,
                        "data": step.data,
                    }
                    for c in completions
                    for step in c.steps
                ],
                dumps=_dumps,
            ),
            "sources": list(sources_of("complete")),
            "settled_state": target_of("settle"),
            "actor": actor[:255],
        },
    )
    by_id = {}
    for written, job_id, from_state, to_state, lease_version, current_version, current_state in rows:
        if written:
            by_id[job_id] = WriteResult(job_id, from_state, to_state, lease_version)
        else:
            by_id[job_id] = _refusal(job_id, lease_version, "complete", current_version, current_state)
    return [by_id.get(_as_uuid(c.job_id), JobNotFound(c.job_id)) for c in completions]


# fail_for_retry and dead_letter are chosen per row by the retry budget, so they must share sources.
assert sources_of("fail_for_retry") == sources_of("dead_letter"), "fail targets must share their sources"


def _retry_or_dead(*, delay_sql: str, spent_suffix: str = "''") -> str:
    """SET clause for a lost attempt: ``failed`` with the next attempt after the delay while retry
    budget is left, else ``dead`` (the SQL mirror of the ``Job.has_retry_budget`` condition)."""
    has_budget = "j.attempts < j.max_attempts"
    return f"""
        state = CASE WHEN {has_budget} THEN %(failed)s ELSE %(dead)s END,
        next_attempt_at = CASE WHEN {has_budget} THEN clock.now + {delay_sql} END,
        finished_at = CASE WHEN {has_budget} THEN NULL ELSE clock.now END,
        completion_reason = CASE WHEN {has_budget} THEN ''
            ELSE 'retry budget spent (' || j.attempts || ' of ' || j.max_attempts || ')' || {spent_suffix} END,
        state_changed_at = clock.now, {_END_LEASE}
    """


def fail(
    job_id,
    lease_version: int,
    *,
    actor: str,
    kind: ErrorKind,
    error_class: str,
    message: str,
    retry_delay_seconds: float = 0.0,
) -> WriteResult:
    """Record a failure and route it by its class.

    transient → ``failed`` with the next attempt after ``retry_delay_seconds`` while budget is left,
    else ``dead``; permanent → ``dead`` at once; unclear → ``unclear`` (a human decides).
    """
    if retry_delay_seconds < 0:
        raise ValueError("retry_delay_seconds must not be negative")
    params = {
        "error_class": error_class[:200],
        "message": _text(message, 10_000),
        "delay": retry_delay_seconds,
        "failed": target_of("fail_for_retry"),
        "dead": target_of("dead_letter"),
        "unclear": target_of("flag_unclear"),
    }
    errors = "error_class = %(error_class)s, error_message = %(message)s"
    if kind is ErrorKind.UNCLEAR:
        sources = sources_of("flag_unclear")
        job_set = f"state = %(unclear)s, state_changed_at = clock.now, {errors}, {_END_LEASE}"
        cause = f"unclear: {error_class}"
    elif kind is ErrorKind.PERMANENT:
        sources = sources_of("dead_letter")
        job_set = (
            f"state = %(dead)s, state_changed_at = clock.now, finished_at = clock.now, {errors}, {_END_LEASE}, "
            "next_attempt_at = NULL, completion_reason = 'permanent error: ' || %(error_class)s"
        )
        cause = f"permanent error: {error_class}"
    else:
        # The retry budget decides per row (mirrors Job.has_retry_budget, the fail_for_retry condition).
        sources = sources_of("fail_for_retry")
        job_set = _retry_or_dead(delay_sql="%(delay)s * interval '1 second'") + f", {errors}"
        cause = f"transient error: {error_class}"
    result, _ = _fenced_write(
        "fail",
        job_id=job_id,
        lease_version=lease_version,
        sources=sources,
        job_set=job_set,
        attempt_set="finished_at = clock.now, error_class = %(error_class)s, error_message = %(message)s, "
        f"outcome = CASE changed.to_state WHEN %(failed)s THEN '{Attempt.Outcome.FAILED}' "
        f"WHEN %(dead)s THEN '{Attempt.Outcome.DEAD}' ELSE '{Attempt.Outcome.UNCLEAR}' END",
        cause=cause,
        actor=actor,
        params=params,
    )
    return result


def release(job_id, lease_version: int, *, actor: str, reason: str, delay_seconds: float = 0.0) -> WriteResult:
    """Hand the job back cleanly (on SIGTERM; or deferred while a host is busy): → planned; the
    attempt is not counted against the retry budget.

    Handed back without a delay, the job keeps its due time and so its place in line: a pool that
    shuts down must not send its jobs behind the whole backlog. Deferred by ``delay_seconds``, it
    is due that much later."""
    result, _ = _fenced_write(
        "release",
        job_id=job_id,
        lease_version=lease_version,
        sources=sources_of("release"),
        job_set=f"state = %(target)s, state_changed_at = clock.now, "
        f"due_at = CASE WHEN %(delay)s > 0 THEN clock.now + %(delay)s * interval '1 second' ELSE j.due_at END, "
        f"attempts = greatest(j.attempts - 1, 0), {_END_LEASE}",
        attempt_set=f"finished_at = clock.now, outcome = '{Attempt.Outcome.RELEASED}', error_message = %(reason)s",
        cause=f"released: {reason}",
        actor=actor,
        params={"target": target_of("release"), "reason": _text(reason, 10_000), "delay": max(delay_seconds, 0.0)},
    )
    return result


# --- sweeps run by the control process ---------------------------------------------------------

_SWEEP_SQL = """
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
target AS (
    SELECT j.id, j.state FROM jobs_job AS j, clock
    WHERE j.state = ANY(%(sources)s) AND {where}
    ORDER BY {order}
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
),
changed AS (
    UPDATE jobs_job AS j SET {job_set}
    FROM target, clock
    WHERE j.id = target.id
    RETURNING j.id, target.state AS from_state, j.state AS to_state, j.lease_version
),
{attempt_cte}
logged AS (
    INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
    SELECT changed.id, changed.from_state, changed.to_state, clock.now, changed.lease_version, %(cause)s, %(actor)s
    FROM changed, clock
)
SELECT id, from_state, to_state, lease_version FROM changed
"""


_SWEEP_ATTEMPT_CTE = """
attempt AS (
    UPDATE jobs_attempt AS a SET {attempt_set}
    FROM changed, clock
    WHERE a.job_id = changed.id AND a.lease_version = changed.lease_version AND a.finished_at IS NULL
),"""


def _sweep(
    *,
    sources,
    where: str,
    order: str,
    job_set: str,
    cause: str,
    actor: str,
    limit: int,
    attempt_set: str | None = None,
    params: dict | None = None,
) -> list[WriteResult]:
    attempt_cte = _SWEEP_ATTEMPT_CTE.format(attempt_set=attempt_set) if attempt_set else ""
    sql = _SWEEP_SQL.format(where=where, order=order, job_set=job_set, attempt_cte=attempt_cte)
    rows = _fetch_all(sql, {"sources": list(sources), "limit": limit, "actor": actor, "cause": cause, **(params or {})})
    return [WriteResult(*row) for row in rows]


# Set-based versions of human transitions for bulk actions: the SET clauses mirror the model
# methods (Job.retry_now, Job.cancel); the allowed sources come from the same declaration.
_BULK = {
    "retry_now": (
        "state = %(target)s, state_changed_at = clock.now, attempts = 0, due_at = clock.now, "
        "next_attempt_at = NULL, finished_at = NULL, completion_reason = ''",
        None,
    ),
    "cancel": (
        f"state = %(target)s, state_changed_at = clock.now, completion_reason = %(reason)s, "
        f"finished_at = clock.now, next_attempt_at = NULL, {_END_LEASE}",
        f"finished_at = clock.now, outcome = '{Attempt.Outcome.CANCELLED}', error_message = %(reason)s",
    ),
}


def transition_many(name: str, job_ids: list, *, actor: str, cause: str, reason: str, user=None) -> list[WriteResult]:
    """Apply a human transition to many jobs in one statement (bulk actions); jobs not in an allowed
    source state, or locked right now, are left alone and not returned. The person's permission is
    checked once, as ``transition_apply`` does per job."""
    if name not in _BULK:
        raise ValueError(f"{name} has no bulk form; bulk forms exist for {', '.join(_BULK)}")
    field = Job._meta.get_field("state")
    permission = next(t.permission for t in field.get_all_transitions(Job) if t.name == name)
    if user is not None and not user.has_perm(permission):
        raise PermissionDenied(f"{user} lacks the permission to {name} jobs")
    if not job_ids:
        return []
    job_set, attempt_set = _BULK[name]
    return _sweep(
        sources=sources_of(name),
        where="j.id = ANY(%(ids)s)",
        order="j.id",
        job_set=job_set,
        attempt_set=attempt_set,
        cause=_text(cause, 500),
        actor=actor[:255],
        limit=len(job_ids),
        params={"ids": [_as_uuid(i) for i in job_ids], "target": target_of(name), "reason": _text(reason, 500)},
    )


def reap_expired(
    *, grace_seconds: float, policy: RetryPolicy, job_type: str | None = None, actor: str = "reaper", limit: int = 500
) -> list[WriteResult]:
    """Release leases that expired more than ``grace_seconds`` ago (database time).

    The lost attempt counts against the retry budget: with budget left the job waits in ``failed``
    for its next attempt (exponential backoff with full jitter), else it goes to ``dead``. The old
    attempt is not told; its next write is refused as stale, because the job left its leased state
    and any new claim raises the lease version. ``job_type`` limits the pass to one type (each
    type has its own retry policy).
    """
    failed, dead = target_of("fail_for_retry"), target_of("dead_letter")
    return _sweep(
        sources=sources_of("fail_for_retry"),
        where="j.lease_expires_at < clock.now - %(grace)s * interval '1 second' "
        "AND (%(job_type)s::text IS NULL OR j.type = %(job_type)s::text)",
        order="j.lease_expires_at",
        job_set=f"""
            {_retry_or_dead(delay_sql=policy.delay_sql("j.attempts"), spent_suffix="': lease expired'")},
            error_class = 'LeaseExpired',
            error_message = 'lease of ' || j.lease_owner || ' expired at ' || j.lease_expires_at
                            || '; last heartbeat at ' || coalesce(j.heartbeat_at::text, 'never')
        """,
        attempt_set=f"finished_at = clock.now, outcome = '{Attempt.Outcome.LEASE_EXPIRED}', "
        "error_class = 'LeaseExpired', error_message = 'no heartbeat before the lease expired'",
        cause="lease expired",
        actor=actor,
        limit=limit,
        params={"grace": grace_seconds, "failed": failed, "dead": dead, "job_type": job_type},
    )


assert sources_of("release") == sources_of("fail_for_retry") == sources_of("dead_letter"), (
    "a rescue chooses among release, fail_for_retry and dead_letter per row"
)

# How many of a job's attempts ended with their worker process dying, this one included.
_DEATHS = (
    "(1 + (SELECT count(*) FROM jobs_attempt AS d "
    f"WHERE d.job_id = j.id AND d.outcome = '{Attempt.Outcome.WORKER_DIED}'))"
)


def rescue_from_dead_worker(
    *,
    lease_owner: str,
    reason: str,
    policy: RetryPolicy,
    poison_deaths: int,
    running: UUID | None | bool = True,
    job_type: str | None = None,
    actor: str = "supervisor",
    limit: int = 1000,
) -> list[WriteResult]:
    """Hand back at once the jobs a worker process held when it died, instead of waiting out the lease.

    ``running`` names the job whose handler ran when the process died (None: none ran; True: not
    known, so every job it held is treated as if it ran). Only that job's attempt ended with the
    death (``worker_died``); the others merely waited their turn in its batch and are handed back
    as a release (``released``, no budget spent), or a poison job would take its batch-mates with it.

    Only the pool's supervisor calls this, after it saw the process end, so nobody can still write
    for that owner; the statement is fenced all the same (owner and leased state, row-locked), so a
    result the process committed before it died stands. The attempt counts against the retry
    budget (it ran). After a job's first worker death it is due again at once and keeps its place
    in line (due time and priority): as far as anyone knows it did nothing wrong (the OOM killer or
    an operator chose the process). A job whose attempts keep ending in worker deaths is the
    suspected cause: from its second death on it waits out the type's backoff, and at
    ``poison_deaths`` deaths it goes to the dead-letter queue as a suspected poison job (with its
    budget spent, earlier).
    """
    if poison_deaths < 2:
        raise ValueError("poison_deaths must be at least 2: a single death says little about the job")
    has_budget = "j.attempts < j.max_attempts"
    ran = "(%(all_ran)s OR j.id = %(running)s::uuid)"
    attempt_ran = ran.replace("j.id", "a.job_id")
    again_now = f"(NOT {ran} OR {_DEATHS} <= 1 AND {has_budget})"
    after_backoff = f"{ran} AND {_DEATHS} > 1 AND {_DEATHS} < %(poison)s AND {has_budget}"
    return _sweep(
        sources=sources_of("release"),
        where="j.lease_owner = %(owner)s AND (%(job_type)s::text IS NULL OR j.type = %(job_type)s::text)",
        order="j.id",
        job_set=f"""
            state = CASE WHEN {again_now} THEN %(planned)s WHEN {after_backoff} THEN %(failed)s ELSE %(dead)s END,
            attempts = CASE WHEN {ran} THEN j.attempts ELSE greatest(j.attempts - 1, 0) END,
            next_attempt_at = CASE WHEN {after_backoff} THEN clock.now + {policy.delay_sql("j.attempts")} END,
            finished_at = CASE WHEN {again_now} OR {after_backoff} THEN NULL ELSE clock.now END,
            completion_reason = CASE WHEN {again_now} OR {after_backoff} THEN ''
                WHEN {_DEATHS} >= %(poison)s THEN 'suspected poison job: its worker died in ' || {_DEATHS} || ' attempts'
                ELSE 'retry budget spent (' || j.attempts || ' of ' || j.max_attempts || '): worker died' END,
            error_class = CASE WHEN {ran} THEN 'WorkerDied' ELSE j.error_class END,
            error_message = CASE WHEN {ran} THEN %(reason)s ELSE j.error_message END,
            state_changed_at = clock.now, {_END_LEASE}
        """,
        attempt_set=f"""finished_at = clock.now,
            outcome = CASE WHEN {attempt_ran} THEN '{Attempt.Outcome.WORKER_DIED}' ELSE '{Attempt.Outcome.RELEASED}' END,
            error_class = CASE WHEN {attempt_ran} THEN 'WorkerDied' ELSE '' END,
            error_message = CASE WHEN {attempt_ran} THEN %(reason)s
                                 ELSE 'its worker died while it waited its turn: ' || %(reason)s END""",
        cause=_text(f"worker died: {reason}", 500),
        actor=actor,
        limit=limit,
        params={
            "owner": lease_owner,
            "all_ran": running is True,
            "running": None if running is None or isinstance(running, bool) else _as_uuid(running),
            "job_type": job_type,
            "reason": _text(reason, 10_000),
            "poison": poison_deaths,
            "planned": target_of("release"),
            "failed": target_of("fail_for_retry"),
            "dead": target_of("dead_letter"),
        },
    )


def retries_promote_due(*, actor: str = "dispatcher", limit: int = 1000) -> list[WriteResult]:
    """Failed jobs whose next attempt has come become planned again (due at that time)."""
    return _sweep(
        sources=sources_of("retry_due"),
        where="j.next_attempt_at <= clock.now",
        order="j.next_attempt_at",
        job_set="state = %(target)s, state_changed_at = clock.now, due_at = j.next_attempt_at, next_attempt_at = NULL",
        cause="retry due",
        actor=actor,
        limit=limit,
        params={"target": target_of("retry_due")},
    )


def unclear_queue_for_review(*, actor: str = "review-queue", limit: int = 1000) -> list[WriteResult]:
    """Unclear jobs become review cases (ready_for_review), oldest first."""
    return _sweep(
        sources=(State.UNCLEAR,),  # recheck_due jobs reach review through their recheck plan
        where="TRUE",
        order="j.state_changed_at",
        job_set="state = %(target)s, state_changed_at = clock.now",
        cause="queued for review",
        actor=actor,
        limit=limit,
        params={"target": target_of("queue_for_review")},
    )


def review_queue_job(job_id, *, actor: str, cause: str) -> WriteResult | None:
    """Open a review case for one job (e.g. a recheck plan that reached its deadline).

    Returns None when the job is not in a state that may go to review.
    """
    swept = _sweep(
        sources=sources_of("queue_for_review"),
        where="j.id = %(job_id)s",
        order="j.id",
        job_set="state = %(target)s, state_changed_at = clock.now",
        cause=cause,
        actor=actor,
        limit=1,
        params={"target": target_of("queue_for_review"), "job_id": _as_uuid(job_id)},
    )
    return swept[0] if swept else None


# --- human and API transitions: the django-fsm methods themselves -----------------------------


def transition_apply(job_id, name: str, *, actor: str, cause: str, user=None, **arguments) -> Job:
    """Run the declared transition ``name`` on the job under a row lock, with its permission checked.

    ``user`` is the person acting in the console (its permission is checked, as django-fsm itself
    does not); ``None`` means a trusted system caller that was authorised elsewhere (an API token's
    scope, a management command). Leaving a leased state ends the current attempt: its later writes
    are refused as stale.
    """
    with transaction.atomic():
        try:
            job = Job.objects.select_for_update().get(pk=job_id)
        except (Job.DoesNotExist, ValueError):
            raise JobNotFound(job_id) from None
        method = getattr(job, name, None)
        meta = getattr(method, "_django_fsm", None)
        if meta is None:
            raise LookupError(f"{name!r} is not a job transition")
        if any(t.custom.get("engine") for t in meta.transitions.values()):
            raise ValueError(f"{name} is performed by the job engine (jobs.leases), not by a person")
        from_state = job.state
        if not can_proceed(method):
            allowed = ", ".join(sources_of(name))
            raise TransitionNotAllowed(
                f"cannot {name} job {job.id}: it is {from_state}; {name} is allowed from {allowed}"
            )
        if user is not None and not has_transition_perm(method, user):
            raise PermissionDenied(f"{user} lacks the permission to {name} jobs")
        method(**arguments)
        job.state_changed_at = LeitstandNow()
        job.save()
        if from_state in LEASED_STATES:
            Attempt.objects.filter(job=job, lease_version=job.lease_version, finished_at__isnull=True).update(
                finished_at=LeitstandNow(), outcome=Attempt.Outcome.CANCELLED, error_message=_text(cause, 10_000)
            )
        TransitionRecord.objects.create(
            job=job,
            from_state=from_state,
            to_state=job.state,
            lease_version=job.lease_version,
            cause=cause[:500],
            actor=actor[:255],
        )
    job.refresh_from_db()
    return job


# --- step events ---------------------------------------------------------------------------------


_STEPS_SQL = """
WITH holder AS (
    SELECT id, correlation_id FROM jobs_job
    WHERE id = %(job_id)s AND lease_version = %(lease_version)s AND state = ANY(%(leased)s)
),
inserted AS (
    INSERT INTO jobs_stepevent (job_id, lease_version, correlation_id, step, outcome, started_at, duration_ms, data)
    SELECT holder.id, %(lease_version)s, holder.correlation_id, e.step, e.outcome, e.started_at, e.duration_ms, e.data
    FROM holder, unnest(%(steps)s::text[], %(outcomes)s::text[], %(starts)s::timestamptz[],
                        %(durations)s::float8[], %(data)s::jsonb[]) AS e(step, outcome, started_at, duration_ms, data)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM holder)
"""


def steps_record(job_id, lease_version: int, steps: list[Step]) -> None:
    """Write step events of the attempt that holds the lease; a stale attempt's are refused."""
    if not steps:
        return
    (is_holder,) = _fetch_one(
        _STEPS_SQL,
        {
            "job_id": _as_uuid(job_id),
            "lease_version": lease_version,
            "leased": list(LEASED_STATES),
            "steps": [_text(s.step, 100) for s in steps],
            "outcomes": [s.outcome for s in steps],
            "starts": [s.started_at for s in steps],
            "durations": [s.duration_ms for s in steps],
            "data": [Jsonb(s.data, dumps=_dumps) for s in steps],
        },
    )
    if not is_holder:
        raise refusal_record(job_id, lease_version, "step")


# --- fencing for writes outside the job row (the effect ledger) --------------------------------


def lease_lock_if_held(job_id, lease_version: int) -> bool:
    """Lock the job row for the rest of the transaction if this attempt still holds its lease."""
    row = _fetch_one(
        "SELECT 1 FROM jobs_job WHERE id = %(job_id)s AND lease_version = %(lease_version)s "
        "AND state = ANY(%(leased)s) FOR UPDATE",
        {"job_id": _as_uuid(job_id), "lease_version": lease_version, "leased": list(LEASED_STATES)},
    )
    return row is not None


_REFUSAL_SQL = """
WITH clock AS MATERIALIZED (SELECT leitstand_now() AS now),
refused AS (
    INSERT INTO jobs_stalewrite (job_id, lease_version, operation, at, current_lease_version, current_state)
    SELECT j.id, %(lease_version)s, %(operation)s, clock.now, j.lease_version, j.state
    FROM jobs_job AS j, clock WHERE j.id = %(job_id)s
    RETURNING current_lease_version, current_state
),
refused_attempt AS (
    UPDATE jobs_attempt AS a
    SET refused_writes = a.refused_writes + 1, last_refused_at = clock.now, last_refused_op = %(operation)s
    FROM clock WHERE a.job_id = %(job_id)s AND a.lease_version = %(lease_version)s
)
SELECT current_lease_version, current_state FROM refused
"""


def refusal_record(job_id, lease_version: int, operation: str) -> StaleAttempt:
    """Record a refused write by a stale attempt and return the exception for the caller to raise."""
    row = _fetch_one(_REFUSAL_SQL, {"job_id": _as_uuid(job_id), "lease_version": lease_version, "operation": operation})
    if row is None:
        raise JobNotFound(job_id)
    return StaleAttempt(
        job_id=job_id,
        lease_version=lease_version,
        operation=operation,
        current_lease_version=row[0],
        current_state=row[1],
    )
