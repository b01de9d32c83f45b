"""The engine's insert of new jobs: one job (``job_insert``) or many in one statement
(``jobs_insert_many``), each once per (type, key namespace, idempotency key).

Private to the runtime's public way to create jobs (``workers.runtime.services.job_submit``,
``jobs_submit_many``, ``jobs_spawn_many``), which consults the job-type registry for the pool, the
retry budget, the subject and the flow key, and wakes the pool; the import-linter contract "Only the
runtime's services insert jobs" keeps every other module out. Tests of the engine's own rules insert
here directly, without a registry.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.db import transaction

from jobs import leases, tracing
from jobs.correlation import header_safe
from jobs.models import Job, job_id_new
from jobs.services import (
    SUBJECT_LENGTH,
    BulkSubmission,
    IdempotencyConflict,
    JobInputError,
    Submission,
    flow_key_of,
    job_check,
    text_check,
)


def job_insert(
    *,
    type: str,
    idempotency_key: str,
    payload: dict,
    actor: str,
    pool: str = "",
    correlation_id: str = "",
    parent_id=None,
    priority: int = 5,
    source: str = "",
    max_attempts: int = 5,
    schema_version: int = 1,
    due_at: datetime | None = None,
    batch_id: int | None = None,
    key_namespace: str = "",
    request_hash: str = "",
    client_id: int | None = None,
    subject: str = "",
    flow_key_declaration: str = "",
) -> Submission:
    """Create a job once per (type, key namespace, idempotency key); a repeat returns that job.

    ``key_namespace`` is whose keys these are: '' for the system's own producers (no API client can
    write there), ``client:<name>`` for an API client's. A repeat must be the same request: with a
    ``request_hash`` (the API's fingerprint of the whole submission) the hashes must be equal,
    otherwise the payloads; a difference raises ``IdempotencyConflict``.

    Call it inside the transaction of the business change that causes the job, so both commit or
    neither does. Without a correlation ID the job starts its own (its parent's, for a sub-job); a
    sub-job joins its parent's batch and belongs to its parent's client, its key in the parent's
    namespace (``client_id`` is the owner of a job without parent: the API client that submits it).
    Without a pool the job goes to the pool named like its type. ``subject`` (what the job is about)
    and ``flow_key_declaration`` (what its pool shares by) are the caller's: the runtime reads them
    from the job type's registration.
    """
    job_check(
        type=type,
        idempotency_key=idempotency_key,
        payload=payload,
        priority=priority,
        max_attempts=max_attempts,
        correlation_id=correlation_id,
        source=source,
        schema_version=schema_version,
        pool=pool or type,
    )
    pool = pool or type
    job_id = job_id_new()
    # No transaction of its own: the insert is one statement, and the read of a taken key's job
    # needs none; a caller's transaction covers both (and a savepoint here would cost two round trips).
    if parent_id is not None:
        correlation_id, batch_id, client_id, key_namespace = _inherited(parent_id, correlation_id, batch_id)
    correlation_id = header_safe(correlation_id)
    trace_parent, trace_state = tracing.current()  # the trace it is created in (jobs/tracing.py)
    subject = str(subject or "")[:SUBJECT_LENGTH]
    job = leases.insert_planned(
        id=job_id,
        subject=subject,
        flow_key=flow_key_of(
            flow_key_declaration, payload=payload, source=source, subject=subject, key_namespace=key_namespace
        ),
        type=type,
        pool=pool,
        key_namespace=key_namespace,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        client_id=client_id,
        correlation_id=correlation_id or str(job_id),
        parent_id=parent_id,
        batch_id=batch_id,
        schema_version=schema_version,
        priority=priority,
        source=source,
        payload=payload,
        max_attempts=max_attempts,
        due_at=due_at,
        trace_parent=trace_parent,
        trace_state=trace_state,
        actor=actor,
    )
    if job is not None:
        return Submission(job, created=True)
    existing = Job.objects.get(type=type, key_namespace=key_namespace, idempotency_key=idempotency_key)
    if not _same_request(existing.request_hash, existing.payload, request_hash, json.dumps(payload)):
        raise IdempotencyConflict(existing)
    return Submission(existing, created=False)


def _inherited(parent_id, correlation_id: str, batch_id: int | None) -> tuple:
    """What a child takes from its parent: the correlation ID (unless it has one), the batch (unless
    given), the client and the key namespace — a child is its parent's client's, and so are its
    keys: two clients' runs of the same name never share children."""
    parent = Job.objects.filter(pk=parent_id).values("correlation_id", "batch_id", "client_id", "key_namespace").first()
    if parent is None:
        raise JobInputError("parent_id", f"job {parent_id} does not exist")
    return (
        correlation_id or parent["correlation_id"],
        batch_id if batch_id is not None else parent["batch_id"],
        parent["client_id"],
        parent["key_namespace"],
    )


def _same_request(stored_hash: str, stored_payload: dict, request_hash: str, payload_json: str) -> bool:
    """Whether a repeat under a taken key is the request that took it: the API's fingerprints when both
    have one, the payloads otherwise."""
    if request_hash and stored_hash:
        return stored_hash == request_hash
    return stored_payload == json.loads(payload_json)


def jobs_insert_many(
    jobs: list[dict],
    *,
    actor: str,
    correlation_id: str,
    batch_id: int | None = None,
    key_namespace: str = "",
    client_id: int | None = None,
    parent_id=None,
    parent: leases.HeldJob | None = None,
    conflicts: str = "raise",
) -> list[BulkSubmission]:
    """Create many jobs in one statement — ``job_insert``'s rules for each (validation, one job per
    (type, key namespace, idempotency key), a repeat must be the same request) — and return them in
    input order. ``jobs``: dicts of ``type``, ``pool``, ``idempotency_key``, ``payload``, ``priority``,
    ``source``, ``max_attempts``, ``schema_version``, ``request_hash``, and, when the type has them,
    ``subject`` and ``flow_key_declaration`` (as for ``job_insert``). A refusal names its job:
    ``jobs[i].field``. ``parent_id``: the parent of them all (a handler's children), whose
    correlation ID, batch, client and key namespace they inherit as with ``job_insert``; ``parent``:
    those, read already as the parent's row was locked.
    ``conflicts``: a key that names a different request raises ``IdempotencyConflict`` ("raise"),
    or is answered as a ``BulkSubmission`` with ``conflict`` set ("report")."""
    if conflicts not in ("raise", "report"):
        raise ValueError(f"conflicts must be 'raise' or 'report', got {conflicts!r}")
    if parent is not None:
        correlation_id = correlation_id or parent.correlation_id
        batch_id = batch_id if batch_id is not None else parent.batch_id
        client_id, key_namespace = parent.client_id, parent.key_namespace
    elif parent_id is not None:
        correlation_id, batch_id, client_id, key_namespace = _inherited(parent_id, correlation_id, batch_id)
    text_check("correlation_id", correlation_id)
    correlation_id = header_safe(correlation_id)
    rows = []
    for index, job in enumerate(jobs):
        try:
            encoded = job_check(
                type=job["type"],
                idempotency_key=job["idempotency_key"],
                payload=job["payload"],
                priority=job["priority"],
                max_attempts=job["max_attempts"],
                correlation_id=correlation_id,
                source=job["source"],
                schema_version=job["schema_version"],
                pool=job["pool"],
            )
        except JobInputError as refused:
            raise JobInputError(f"jobs[{index}].{refused.field}", refused.message) from None
        subject = str(job.get("subject") or "")[:SUBJECT_LENGTH]
        flow_key = flow_key_of(
            job.get("flow_key_declaration", ""),
            payload=job["payload"],
            source=job["source"],
            subject=subject,
            key_namespace=key_namespace,
        )
        rows.append(
            {**job, "id": job_id_new(), "payload_json": encoded.decode(), "subject": subject, "flow_key": flow_key}
        )
    trace_parent, trace_state = tracing.current()
    with transaction.atomic():
        inserted = leases.insert_planned_many(
            rows=rows,
            actor=actor,
            key_namespace=key_namespace,
            client_id=client_id,
            correlation_id=correlation_id,
            batch_id=batch_id,
            parent_id=parent_id,
            trace_parent=trace_parent,
            trace_state=trace_state,
        )
        repeated = [row for row in rows if row["id"] not in inserted]
        existing = {}
        if repeated:
            found = leases.jobs_by_keys(
                types=[row["type"] for row in repeated],
                keys=[row["idempotency_key"] for row in repeated],
                key_namespace=key_namespace,
            )
            existing = {
                (job_type, key): (job_id, digest, payload, batch)
                for job_id, job_type, key, digest, payload, batch in found
            }
        results = []
        for row in rows:
            if row["id"] in inserted:
                results.append(BulkSubmission(row["id"], batch_id, True))
                continue
            job_id, digest, payload, batch = existing[(row["type"], row["idempotency_key"])]
            if _same_request(digest, payload, row["request_hash"], row["payload_json"]):
                results.append(BulkSubmission(job_id, batch, False))
            elif conflicts == "report":
                results.append(BulkSubmission(job_id, batch, False, conflict=True))
            else:
                raise IdempotencyConflict(Job.objects.get(pk=job_id))
    return results
