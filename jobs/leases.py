"""Every write to a job's state and lease columns happens here.

Every statement is a named one of ``jobs/queries.sql`` (``jobs/sql.py`` reads them); this module
chooses the statement, fills its parameters from the django-fsm declaration and ``Attempt.Outcome``
and interprets its answer.

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

import contextlib
import heapq
import json
import os
import re
import time
from collections import Counter
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

from jobs import options, tracing
from jobs.errors import ErrorKind
from jobs.models import LEASED_STATES, Attempt, Job, LeitstandNow, State
from jobs.models import Transition as TransitionRecord
from jobs.retry import RetryPolicy
from jobs.sql import queries


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
        return cls(host=options.current().host_name, pid=os.getpid(), pool=pool)


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
    due_at: datetime  # when it was due: where the claim found it in line
    trace_parent: str = ""  # the W3C trace context it was created in (jobs/tracing.py)
    trace_state: str = ""


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


class _SpannedCursor(psycopg.Cursor):
    """With LEITSTAND_TRACE_DATABASE, each engine statement a span named by its name (jobs/tracing.py)."""

    def execute(self, query, params=None, **kwargs):
        with tracing.database_span(query):
            return super().execute(query, params, **kwargs)


@contextmanager
def _server_bound_cursor() -> Iterator[psycopg.Cursor]:
    """A cursor with server-side parameter binding on Django's connection (same session and
    transaction). Django's own cursors bind on the client, which spends more time quoting the
    arrays of a batch as SQL literals than PostgreSQL spends executing the statement; errors still
    pass through Django's wrapper, so they arrive as django.db exceptions and mark the connection."""
    connection.ensure_connection()
    cursor_class = _SpannedCursor if tracing.database_on() else psycopg.Cursor
    with connection.wrap_database_errors, cursor_class(connection.connection) as cursor:
        # Strings go as text (not "unknown"), so one parameter may serve several places.
        cursor.adapters.register_dumper(str, StrDumper)
        yield cursor


# What PostgreSQL text and jsonb cannot hold, and hostile pages put anywhere: NUL, and lone
# surrogates (a page declared as UTF-7 decodes '+2AA-' to one; UTF-8 has no form for it).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _text(value: str, limit: int) -> str:
    """Text from handlers may come from hostile pages: what PostgreSQL refuses is replaced."""
    return _UNSTORABLE.sub("\ufffd", value)[:limit]


def _storable(value):
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable(v) for v in value]
    return value


def _dumps(value) -> str:
    # Handler data may hold values JSON cannot (datetimes, UUIDs, Decimals): recorded as their text;
    # jsonb refuses NUL and lone surrogates. JSON writes them as the escapes \u0000 and \udXXX, so
    # text without those escapes needs no scrubbing (the walk over every value took 7 % of a no-op
    # worker's time under cProfile); text with one (a character outside the BMP is written as a
    # surrogate pair, a literal backslash-u too) is made again from the scrubbed value.
    try:
        text = json.dumps(value, default=str)
    except TypeError:  # a key JSON cannot hold (a tuple): the walk below makes every key text
        text = None
    if text is not None and "\\u0000" not in text and "\\ud" not in text:
        return text
    return json.dumps(_storable(value), default=lambda v: _storable(str(v)))


def _as_uuid(job_id) -> UUID:
    if isinstance(job_id, UUID):
        return job_id
    try:
        return UUID(str(job_id))
    except ValueError:
        raise JobNotFound(job_id) from None


# The engine's statements are not prepared: Django opens psycopg's connections with prepared
# statements off, and turning them on for these statements measured within this machine's noise
# (``bench.throughput``, docs/performance.md). So PostgreSQL plans each with its parameters' values,
# and a partial index whose condition they match (a state) can serve it — which a prepared
# statement's generic plan cannot prove.


def _fetch_one(sql: str, params: dict[str, Any]) -> tuple:
    with _server_bound_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _fetch_all(sql: str, params: dict[str, Any]) -> list[tuple]:
    with _server_bound_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


# --- creation -----------------------------------------------------------------------------------


def insert_planned(*, payload: dict, actor: str, **columns) -> Job | None:
    """Insert a job in its initial state with its creation transition, unless its
    (type, key namespace, idempotency key) exists. The new job as the statement returned it (no
    second read), or None. Input is validated by ``jobs.services``."""

    initial = Job._meta.get_field("state").default
    parent_id = columns.pop("parent_id", None)
    with _server_bound_cursor() as cursor:
        cursor.execute(
            queries.job_insert_unless_key_exists,
            {
                "batch_id": None,
                "key_namespace": "",
                "request_hash": "",
                "client_id": None,
                "subject": "",
                "flow_key": "",
                "trace_parent": "",
                "trace_state": "",
                **columns,
                "parent_id": _as_uuid(parent_id) if parent_id else None,
                "payload": Jsonb(payload),
                "state": initial,
                "actor": actor[:255],
            },
        )
        row = cursor.fetchone()
        if row is None:
            return None
        values = dict(zip((column.name for column in cursor.description), row))
    # As the ORM would load it: each field's conversion from the database (JSON arrives as text here).
    fields = Job._meta.concrete_fields
    return Job.from_db(
        connection.alias,
        [f.attname for f in fields],
        [_from_db(f, values[f.column]) for f in fields],
    )


def _from_db(field, value):
    return field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value


def insert_planned_many(
    *,
    rows: list[dict],
    actor: str,
    key_namespace: str,
    client_id,
    correlation_id: str,
    batch_id,
    parent_id=None,
    trace_parent: str = "",
    trace_state: str = "",
) -> set:
    """Insert many jobs (``rows``: id, type, pool, idempotency_key, request_hash, schema_version,
    priority, source, flow_key, subject, payload) in one statement with their creation transitions, each unless
    its key exists; the IDs inserted. ``parent_id``: the parent of them all, if any; the trace context
    is theirs all too. Input is validated by ``jobs.services``."""
    columns = {
        "ids": "id",
        "types": "type",
        "pools": "pool",
        "keys": "idempotency_key",
        "hashes": "request_hash",
        "schema_versions": "schema_version",
        "priorities": "priority",
        "sources": "source",
        "flow_keys": "flow_key",
        "subjects": "subject",
        "max_attempts": "max_attempts",
    }
    params: dict[str, Any] = {name: [row[column] for row in rows] for name, column in columns.items()}
    params["payloads"] = [row["payload_json"] for row in rows]  # JSON text, cast to jsonb by the statement
    params.update(
        key_namespace=key_namespace,
        client_id=client_id,
        correlation_id=correlation_id,
        batch_id=batch_id,
        parent_id=_as_uuid(parent_id) if parent_id else None,
        trace_parent=trace_parent,
        trace_state=trace_state,
        state=Job._meta.get_field("state").default,
        actor=actor[:255],
    )
    return {row[0] for row in _fetch_all(queries.jobs_insert_many_unless_key_exists, params)}


def jobs_by_keys(*, types: list[str], keys: list[str], key_namespace: str) -> list[tuple]:
    """(id, type, idempotency key, request hash, payload, batch ID) of the jobs holding these keys."""
    rows = _fetch_all(queries.jobs_by_keys, {"types": types, "keys": keys, "key_namespace": key_namespace})
    # Django leaves JSON undecoded on raw cursors: the payload is compared with a request's.
    return [(*row[:4], json.loads(row[4]) if isinstance(row[4], str) else row[4], row[5]) for row in rows]


# --- claim ------------------------------------------------------------------------------------


def claim(
    *,
    pool: str,
    worker: WorkerIdentity,
    lease_seconds: float | Mapping[str, float],
    limit: int = 1,
    start: bool = False,
    processing_versions: Mapping[str, str] | None = None,
    advance_lanes: bool = False,
    flow_limit: int | None = None,
) -> list[ClaimedJob]:
    """Reserve up to ``limit`` due jobs of one pool, most urgent lane first, then by weighted fair
    share between the pool's flow keys (``Job.flow_key``), each key's oldest due first.

    ``lease_seconds`` is one duration, or one per job type (types not named get the longest).
    With ``start=True`` the jobs also begin at once (reserved → running, both transitions logged,
    ``processing_versions`` recorded per type): a worker that runs what it claims saves a commit
    per job. A claim serves one pool. ``flow_limit``: how many leases one key may hold in the pool
    unless an operator set its own limit (None: no limit); a paused key gets nothing. Each lane is
    walked from its next due time, past the jobs claimed before it that vacuum may not have removed
    yet; with ``advance_lanes`` (a caller in a backlog, whose claims come back full) the claim also
    reads the next due time of the lanes it took from again, so the next claim starts past the jobs
    it took (workers/runtime/claim_front.py).
    """
    if limit < 1:
        raise ValueError(f"claim limit must be at least 1, got {limit}")
    if flow_limit is not None and flow_limit < 1:
        raise ValueError(f"flow_limit must be at least 1, got {flow_limit}")
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
    params = {
        "source": source,
        "target": target,
        "final": target_of("start") if start else target,
        "start": start,
        "pool": pool,
        "types": types,
        "leases": [float(leases_by_type.get(t, default_lease)) for t in types],
        "versions": [versions.get(t) for t in types],
        "default_lease": default_lease,
        "owner": worker.lease_owner,
        "host": worker.host,
        "pid": worker.pid,
        "default_limit": flow_limit,
        "leased": list(LEASED_STATES),
    }
    claimed: list[ClaimedJob] = []
    for _ in range(CLAIM_ROUNDS):
        more, short, lone, served = _claim_once(params, limit - len(claimed))
        claimed += more
        if advance_lanes and served:
            # In a backlog: the lanes it took from start their next probe past the jobs it took.
            short = sorted({*short, *served})
        # A lane's hint was early (its jobs were taken, cancelled or deferred), or the lone lane ran
        # dry: read the lanes again, and claim again for what is still missing.
        changed = short and (_fetch_one(queries.flow_lanes_refresh, {"lanes": short})[0] or lone)
        if not changed or len(claimed) >= limit:
            break
    return claimed


# Whether an operator set a running limit or a rate limit on a key of a pool, as read at most
# LIMITS_SECONDS ago: a limit set in the console applies to the claims from a second later.
LIMITS_SECONDS = 1.0
_limits_seen: dict[str, tuple[float, bool]] = {}


def flow_settings_changed() -> None:
    """Forget the limits and lanes read: this process changed a key's settings (the others see it
    within ``LIMITS_SECONDS``)."""
    _limits_seen.clear()
    _lone_lanes.clear()


def flow_rest_next_seconds(pool: str) -> float | None:
    """Seconds until the first key of ``pool`` at rest with due work and no job leased may start a
    job (``FlowRest``); None when no such key rests."""
    return _fetch_one(queries.flow_rest_next_end, {"pool": pool, "leased": list(LEASED_STATES)})[0]


def _pool_has_key_limits(pool: str) -> bool:
    """Whether a key of ``pool`` has a running limit or a rate limit of its own. (Whether a claim
    fills rate buckets comes with the lanes it reads, not from here.)"""
    now = time.monotonic()
    seen = _limits_seen.get(pool)
    if seen is None or seen[0] < now:
        seen = (now + LIMITS_SECONDS, _fetch_one(queries.flow_keys_limited, {"pool": pool})[0])
        _limits_seen[pool] = seen
    return seen[1]


def fair_shares(lanes: list[tuple], limit: int) -> dict[int, int]:
    """How many jobs each lane gets of a claim of ``limit``: weighted fair share between keys
    (start-time fair queueing). ``lanes``: (id, priority, key, vtime, weight, room, due, next_due,
    clock) as ``flow_lanes_due`` reads them. A lane starts at its vtime or its pool lane's clock,
    whichever is further (no credit for time it could not be served), and its i-th job stands at
    start + i / weight; the ``limit`` first places go, the most urgent lane of priority first, no
    lane more than its due jobs and no key more than its room (None: no limit)."""
    room = {lane[2]: lane[5] for lane in lanes}
    line = [(lane[1], max(lane[3], lane[8]), index) for index, lane in enumerate(lanes) if lane[6] > 0]
    heapq.heapify(line)
    shares: dict[int, int] = {}
    taken = 0
    while line and taken < limit:
        priority, place, index = heapq.heappop(line)
        lane_id, _, key, _, weight, _, due = lanes[index][:7]
        if shares.get(lane_id, 0) >= due or (room[key] is not None and room[key] <= 0):
            continue
        if room[key] is not None:
            room[key] -= 1
        shares[lane_id] = shares.get(lane_id, 0) + 1
        taken += 1
        heapq.heappush(line, (priority, place + 1.0 / weight, index))
    return shares


# A claim that found one lane with due work in its pool (no other key waiting) takes from it again
# without reading the lanes for LONE_LANE_SECONDS: a pool whose jobs share one key claims as it did
# before keys, and another key's first jobs wait at most this long for their share.
LONE_LANE_SECONDS = 0.5
# Lanes a claim reads beyond its limit: those whose hint was early (no due job) are read again instead
# of taking its places.
STALE_LANES_SKIPPED = 32
# Rounds of read-again-and-claim-again one claim makes while its lanes' hints were early.
CLAIM_ROUNDS = 3
_lone_lanes: dict[str, tuple[float, tuple]] = {}


def _claim_once(params: dict[str, Any], limit: int) -> tuple[list[ClaimedJob], list[int], bool, list[int]]:
    """One claim: the jobs, the lanes that gave fewer than their share, whether it took from the
    lone lane without reading the lanes, and the lanes it took from. Where a running limit applies,
    the claim holds the pool's claim lock: it counts the leases after the claim before it committed,
    and where a rate limit applies, fills the buckets of the keys it started jobs of before it commits."""
    pool = params["pool"]
    params = {**params, "limit": limit}
    limited = params["default_limit"] is not None or _pool_has_key_limits(pool)
    with transaction.atomic() if limited else contextlib.nullcontext():
        cached = _lone_lanes.get(pool)
        lone = not limited and cached is not None and cached[0] > time.monotonic()
        if lone:
            lanes, charged = [(*cached[1][:6], limit, *cached[1][7:])], set()
        else:
            if limited:
                _fetch_one(queries.flow_claim_lock, params)
            lanes = _fetch_all(
                queries.flow_lanes_due, {**params, "limited": limited, "window": limit + STALE_LANES_SKIPPED}
            )
            if len(lanes) == 1 and lanes[0][6] > 0 and not limited and limit > 1:
                _lone_lanes[pool] = (time.monotonic() + LONE_LANE_SECONDS, lanes[0])
            # A lane is charged its jobs when it shared the claim with another of its priority (or
            # the claim saw only as many lanes as it could use): alone, it takes nothing from anyone.
            serving = [lane for lane in lanes if lane[6] > 0]
            by_priority = Counter(lane[1] for lane in serving)
            charged = {lane[0] for lane in serving if by_priority[lane[1]] > 1 or len(serving) >= limit}
        shares = fair_shares(lanes, limit)
        # A lane whose hint said due but that has no due job: read again (after this transaction).
        stale = [lane[0] for lane in lanes if lane[6] == 0]
        if not shares:
            return [], stale, False, []
        chosen = [lane for lane in lanes if lane[0] in shares]
        rows = _fetch_all(
            queries.jobs_claim_due_skip_locked,
            {
                **params,
                "lanes": [lane[0] for lane in chosen],
                "priorities": [lane[1] for lane in chosen],
                "keys": [lane[2] for lane in chosen],
                "takes": [shares[lane[0]] for lane in chosen],
                "weights": [lane[4] if lane[0] in charged else 0 for lane in chosen],
                "fronts": [lane[7] for lane in chosen],
                "starts": [max(lane[3], lane[8]) for lane in chosen],
            },
        )
        rated_lanes = {lane[0]: lane[2] for lane in chosen if not lone and lane[10]}
        if rated_lanes and rows:
            by_key = Counter(rated_lanes[row[13]] for row in rows if row[13] in rated_lanes)
            _fetch_one(
                queries.flow_rates_charge,
                {"pool": pool, "keys": list(by_key), "counts": list(by_key.values()), "now": lanes[0][9]},
            )
    # Django leaves JSON undecoded on raw cursors (its fields decode it); decode it here.
    claimed = [
        ClaimedJob(*row[:5], json.loads(row[5]) if isinstance(row[5], str) else row[5], *row[6:13]) for row in rows
    ]
    got = Counter(row[13] for row in rows)
    short = [lane for lane, take in shares.items() if got[lane] < take]
    if short:
        _lone_lanes.pop(pool, None)
    return claimed, short + stale, lone, list(got)


# --- fenced writes by the lease holder ---------------------------------------------------------


def _fenced_write(
    statement: str,
    operation: str,
    *,
    job_id: UUID | str,
    lease_version: int,
    sources: tuple[str, ...],
    cause: str,
    actor: str,
    params: dict[str, Any] | None = None,
) -> tuple[WriteResult, datetime | None]:
    """Run one ``_if_lease_held`` statement of ``jobs/queries.sql``: the write, or its refusal recorded."""
    row = _fetch_one(
        statement,
        {
            "job_id": _as_uuid(job_id),
            "lease_version": lease_version,
            "sources": list(sources),
            "operation": operation,
            "cause": _text(cause, 500),
            "actor": actor[:255],
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
        # The statement read the job as of its start; when its guard failed because another
        # transaction (the reaper) changed the job while this write waited for the row lock, that
        # snapshot still shows the writer's lease. Look again before blaming the writer.
        current_version, current_state = Job.objects.filter(pk=job_id).values_list("lease_version", "state").get()
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
        queries.job_start_if_lease_held,
        "start",
        job_id=job_id,
        lease_version=lease_version,
        sources=sources_of("start"),
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
        queries.job_heartbeat_if_lease_held,
        "progress" if progress is not None else "heartbeat",
        job_id=job_id,
        lease_version=lease_version,
        sources=LEASED_STATES,
        cause="heartbeat",
        actor="",
        params={"lease": lease_seconds, "progress": Jsonb(progress, dumps=_dumps) if progress is not None else None},
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
        queries.job_store_result_if_lease_held,
        name,
        job_id=job_id,
        lease_version=lease_version,
        sources=sources_of(name),
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
class AttemptNotes:
    """What an attempt keeps beside its outcome: its span's ``traceparent`` when traces are recorded
    (jobs/tracing.py) and the log lines it kept (jobs/logs.py, ``Kept.stored``)."""

    trace_span: str = ""
    log_lines: dict | None = None

    def params(self) -> dict:
        return {
            "trace_span": self.trace_span[:55],
            "log_lines": Jsonb(self.log_lines, dumps=_dumps) if self.log_lines is not None else None,
        }


NO_NOTES = AttemptNotes()


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
    notes: AttemptNotes = NO_NOTES


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
        queries.jobs_store_results_if_lease_held,
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
                        "trace_span": c.notes.trace_span[:55],
                        "log_lines": c.notes.log_lines,
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
            "operation": "complete",
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


def fail(
    job_id,
    lease_version: int,
    *,
    actor: str,
    kind: ErrorKind,
    error_class: str,
    message: str,
    retry_delay_seconds: float = 0.0,
    notes: AttemptNotes = NO_NOTES,
) -> WriteResult:
    """Record a failure and route it by its class.

    transient → ``failed`` with the next attempt after ``retry_delay_seconds`` while budget is left,
    else ``dead``; permanent → ``dead`` at once; unclear → ``unclear`` (a human decides).
    """
    if retry_delay_seconds < 0:
        raise ValueError("retry_delay_seconds must not be negative")
    sources, cause = {
        ErrorKind.UNCLEAR: (sources_of("flag_unclear"), f"unclear: {error_class}"),
        ErrorKind.PERMANENT: (sources_of("dead_letter"), f"permanent error: {error_class}"),
        ErrorKind.TRANSIENT: (sources_of("fail_for_retry"), f"transient error: {error_class}"),
    }[kind]
    result, _ = _fenced_write(
        queries.job_fail_if_lease_held,
        "fail",
        job_id=job_id,
        lease_version=lease_version,
        sources=sources,
        cause=cause,
        actor=actor,
        params={
            "is_unclear": kind is ErrorKind.UNCLEAR,
            "is_permanent": kind is ErrorKind.PERMANENT,
            "error_class": error_class[:200],
            "message": _text(message, 10_000),
            "delay": retry_delay_seconds,
            "failed": target_of("fail_for_retry"),
            "dead": target_of("dead_letter"),
            "unclear": target_of("flag_unclear"),
            "outcome_failed": Attempt.Outcome.FAILED,
            "outcome_dead": Attempt.Outcome.DEAD,
            "outcome_unclear": Attempt.Outcome.UNCLEAR,
            **notes.params(),
        },
    )
    return result


def release(
    job_id,
    lease_version: int,
    *,
    actor: str,
    reason: str,
    delay_seconds: float = 0.0,
    notes: AttemptNotes = NO_NOTES,
) -> WriteResult:
    """Hand the job back cleanly (on SIGTERM; or deferred while a host is busy): → planned; the
    attempt is not counted against the retry budget.

    Handed back without a delay, the job keeps its due time and so its place in line: a pool that
    shuts down must not send its jobs behind the whole backlog. Deferred by ``delay_seconds``, it
    is due that much later."""
    result, _ = _fenced_write(
        queries.job_release_if_lease_held,
        "release",
        job_id=job_id,
        lease_version=lease_version,
        sources=sources_of("release"),
        cause=f"released: {reason}",
        actor=actor,
        params={
            "target": target_of("release"),
            "reason": _text(reason, 10_000),
            "delay": max(delay_seconds, 0.0),
            "outcome": Attempt.Outcome.RELEASED,
            **notes.params(),
        },
    )
    return result


def reorder(job_id, *, priority: int | None = None, due_at: datetime | None = None) -> tuple[int, datetime] | None:
    """Move a job waiting in line (planned): its lane and its due time, None leaving either as it is.
    Returns its lane and due time, or None when it is not waiting."""
    with transaction.atomic():
        moved = _fetch_one(
            queries.job_reorder_if_waiting,
            {"job_id": _as_uuid(job_id), "priority": priority, "due_at": due_at, "waiting": target_of("retry_due")},
        )
        if moved is not None:  # no transition: its flow lane is touched here (the trigger does it for those)
            _fetch_one(queries.flow_lanes_touch, {"ids": [_as_uuid(job_id)]})
    return moved


def attempt_retried(job_id, lease_version: int) -> str | None:
    """Whether the attempt ``lease_version`` is a retry — the attempt before it ended otherwise than
    handing the job back (a release: a deferral, a stopping pool) — and if so that attempt's span's
    ``traceparent`` ('' when it recorded none: its worker died); None when it is not a retry."""
    row = _fetch_one(
        queries.attempt_previous_outcome_and_span, {"job_id": _as_uuid(job_id), "lease_version": lease_version}
    )
    if row is None or row[0] in ("", Attempt.Outcome.RELEASED):
        return None
    return row[1]


# --- sweeps run by the control process ---------------------------------------------------------


def _sweep(statement: str, *, sources, cause: str, actor: str, limit: int, **params) -> list[WriteResult]:
    """Run one set-based statement of ``jobs/queries.sql`` over the jobs its guard selects."""
    rows = _fetch_all(
        statement,
        {"sources": list(sources), "limit": limit, "actor": actor[:255], "cause": _text(cause, 500), **params},
    )
    return [WriteResult(*row) for row in rows]


# The set-based forms of human transitions for bulk actions: their statements mirror the model
# methods (Job.retry_now, Job.cancel, Job.confirm); the allowed sources come from the same declaration.
_BULK = {
    "retry_now": "jobs_retry_now_many_if_allowed",
    "cancel": "jobs_cancel_many_if_allowed",
    "confirm": "jobs_confirm_many_if_allowed",
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
    return _sweep(
        getattr(queries, _BULK[name]),
        sources=sources_of(name),
        cause=cause,
        actor=actor,
        limit=len(job_ids),
        ids=[_as_uuid(i) for i in job_ids],
        target=target_of(name),
        reason=_text(reason, 500),
        outcome=Attempt.Outcome.CANCELLED,
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
    return _sweep(
        queries.jobs_reap_if_lease_expired,
        sources=sources_of("fail_for_retry"),
        cause="lease expired",
        actor=actor,
        limit=limit,
        grace=grace_seconds,
        job_type=job_type,
        failed=target_of("fail_for_retry"),
        dead=target_of("dead_letter"),
        outcome=Attempt.Outcome.LEASE_EXPIRED,
        **policy.sql_params(),
    )


assert sources_of("release") == sources_of("fail_for_retry") == sources_of("dead_letter"), (
    "a rescue chooses among release, fail_for_retry and dead_letter per row"
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
    return _sweep(
        queries.jobs_rescue_if_worker_died,
        sources=sources_of("release"),
        cause=f"worker died: {reason}",
        actor=actor,
        limit=limit,
        owner=lease_owner,
        all_ran=running is True,
        running=None if running is None or isinstance(running, bool) else _as_uuid(running),
        job_type=job_type,
        reason=_text(reason, 10_000),
        poison=poison_deaths,
        planned=target_of("release"),
        failed=target_of("fail_for_retry"),
        dead=target_of("dead_letter"),
        outcome_died=Attempt.Outcome.WORKER_DIED,
        outcome_released=Attempt.Outcome.RELEASED,
        **policy.sql_params(),
    )


def retries_promote_due(*, actor: str = "dispatcher", limit: int = 1000) -> list[WriteResult]:
    """Failed jobs whose next attempt has come become planned again, in their place in line (their
    due time unchanged: the backoff was their earliest start)."""
    return _sweep(
        queries.jobs_plan_if_retry_due,
        sources=sources_of("retry_due"),
        cause="retry due",
        actor=actor,
        limit=limit,
        target=target_of("retry_due"),
    )


def unclear_queue_for_review(*, actor: str = "review-queue", limit: int = 1000) -> list[WriteResult]:
    """Unclear jobs become review cases (ready_for_review), oldest first."""
    return _sweep(
        queries.jobs_queue_for_review_if_allowed,
        sources=(State.UNCLEAR,),  # recheck_due jobs reach review through their recheck plan
        cause="queued for review",
        actor=actor,
        limit=limit,
        target=target_of("queue_for_review"),
        job_id=None,
    )


def review_queue_job(job_id, *, actor: str, cause: str) -> WriteResult | None:
    """Open a review case for one job (e.g. a recheck plan that reached its deadline).

    Returns None when the job is not in a state that may go to review.
    """
    swept = _sweep(
        queries.jobs_queue_for_review_if_allowed,
        sources=sources_of("queue_for_review"),
        cause=cause,
        actor=actor,
        limit=1,
        target=target_of("queue_for_review"),
        job_id=_as_uuid(job_id),
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


def steps_record(job_id, lease_version: int, steps: list[Step]) -> None:
    """Write step events of the attempt that holds the lease; a stale attempt's are refused."""
    if not steps:
        return
    (is_holder,) = _fetch_one(
        queries.step_events_insert_if_lease_held,
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


@dataclass(frozen=True)
class HeldJob:
    """What a job's children inherit from it, read as its row is locked (``lease_lock_if_held``)."""

    correlation_id: str
    batch_id: int | None
    client_id: int | None
    key_namespace: str


def lease_lock_if_held(job_id, lease_version: int) -> HeldJob | None:
    """Lock the job row for the rest of the transaction if this attempt still holds its lease; None
    if it does not."""
    row = _fetch_one(
        queries.job_lock_if_lease_held,
        {"job_id": _as_uuid(job_id), "lease_version": lease_version, "leased": list(LEASED_STATES)},
    )
    return HeldJob(*row) if row is not None else None


def refusal_record(job_id, lease_version: int, operation: str) -> StaleAttempt:
    """Record a refused write by a stale attempt and return the exception for the caller to raise."""
    row = _fetch_one(
        queries.stale_write_record, {"job_id": _as_uuid(job_id), "lease_version": lease_version, "operation": operation}
    )
    if row is None:
        raise JobNotFound(job_id)
    return StaleAttempt(
        job_id=job_id,
        lease_version=lease_version,
        operation=operation,
        current_lease_version=row[0],
        current_state=row[1],
    )
