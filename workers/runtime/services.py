"""Services of the runtime: submitting jobs of registered types, pausing and resuming pools."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import transaction

from jobs import insert, leases
from jobs import services as job_services
from jobs.batches import batch_create
from jobs.errors import PermanentError
from jobs.models import OPERATE_PERMISSION, Batch, Client, Job, LeitstandNow
from jobs.services import JobInputError, Submission
from workers.runtime import dispatch, options
from workers.runtime.models import Pool
from workers.runtime.registry import UnknownJobType, registry


def job_submit(
    *,
    job_type: str,
    payload: dict,
    idempotency_key: str,
    actor: str,
    priority: int | None = None,
    correlation_id: str = "",
    source: str = "",
    due_at: datetime | None = None,
    parent_id=None,
    parent_lease_version: int | None = None,
    batch_id: int | None = None,
    client: Client | None = None,
    request_hash: str = "",
) -> Submission:
    """Create a job of a registered type in its pool and wake the pool when the transaction commits.
    ``client``: the API client submitting it, which owns it and whose namespace its key lives in.

    A handler's child (``parent_lease_version`` given) is created only while that attempt still
    holds the parent's lease, locked for the insert: a stale attempt's spawn is refused
    (``leases.StaleAttempt``) and recorded, like its other writes.
    """
    declared, pool = _declared(job_type, payload, client=client)
    with transaction.atomic():
        if parent_lease_version is not None and leases.lease_lock_if_held(parent_id, parent_lease_version) is None:
            submission = None
        else:
            submission = insert.job_insert(
                type=job_type,
                pool=pool,
                payload=payload,
                idempotency_key=idempotency_key,
                actor=actor,
                priority=declared.default_priority if priority is None else priority,
                correlation_id=correlation_id,
                source=source,
                due_at=due_at,
                parent_id=parent_id,
                max_attempts=declared.retry.max_attempts,
                schema_version=declared.schema_version,
                batch_id=batch_id,
                key_namespace=client.key_namespace if client else "",
                client_id=client.pk if client else None,
                request_hash=request_hash,
                subject=declared.subject_of(payload),
                flow_key_declaration=declared.flow_key,
            )
        if submission is not None and submission.created:
            dispatch.wakeup_after_commit(pool)
    if submission is None:
        raise leases.refusal_record(parent_id, parent_lease_version, "spawn")
    return submission


def _declared(job_type: str, payload, *, client: Client | None = None) -> tuple:
    """The registered type and the pool a job of it goes to (an operator's synthetic job may choose
    its pool, an API client's may not: its load stays in the type's own pool); its payload checked
    by the type's parser."""
    try:
        declared = registry.get(job_type)
    except UnknownJobType as exc:
        raise JobInputError("type", str(exc)) from None
    if declared.parse_payload is not None and isinstance(payload, dict):
        try:
            declared.parse_payload(payload)
        except PermanentError as refused:
            raise JobInputError("payload", str(refused)) from None
    pool = declared.pool
    if declared.may_choose_pool and isinstance(payload, dict) and payload.get("pool"):
        pool = payload["pool"]
        if client is not None and pool != declared.pool:
            raise JobInputError(
                "payload.pool",
                f"an API client's {job_type} jobs run in the {declared.pool} pool; only operators choose",
            )
        if refusal := options.current().pool_refusal(pool):
            raise JobInputError("payload.pool", refusal)
    return declared, pool


def jobs_submit_many(
    jobs: list[dict], *, actor: str, correlation_id: str, batch_id: int | None = None, client: Client | None = None
) -> list[job_services.BulkSubmission]:
    """``job_submit`` for many jobs of registered types in one statement (a batch's members); each
    pool that got new jobs is woken once when the transaction commits. Refusals name ``jobs[i].field``."""
    prepared = _prepared(jobs, client=client)
    with transaction.atomic():
        submitted = insert.jobs_insert_many(
            prepared,
            actor=actor,
            correlation_id=correlation_id,
            batch_id=batch_id,
            key_namespace=client.key_namespace if client else "",
            client_id=client.pk if client else None,
        )
        _wake_after_commit(prepared, submitted)
    return submitted


def jobs_spawn_many(
    jobs: list[dict], *, parent_id, parent_lease_version: int, correlation_id: str, actor: str = "spawn"
) -> list[job_services.BulkSubmission]:
    """A handler's children in one statement (``jobs``: as for ``jobs_submit_many``), created only
    while that attempt holds the parent's lease, locked once for them all: a stale attempt's spawn is
    refused and recorded. A child whose key names a different request is reported (``conflict``),
    not raised: the others are still created; so is a child its checks refuse (``refused``: why)."""
    refusals = spawn_refusals(jobs, correlation_id=correlation_id)
    kept = [job for job, refused in zip(jobs, refusals) if not refused]
    prepared = _prepared(kept, given_subjects=True)
    with transaction.atomic():
        parent = leases.lease_lock_if_held(parent_id, parent_lease_version)
        if parent is not None:
            created = (
                insert.jobs_insert_many(
                    prepared,
                    actor=actor,
                    correlation_id=correlation_id,
                    parent_id=parent_id,
                    parent=parent,
                    conflicts="report",
                )
                if prepared
                else []  # every child refused: nothing to insert, the parent goes on
            )
            _wake_after_commit(prepared, created)
        else:
            created = None
    if created is None:
        raise leases.refusal_record(parent_id, parent_lease_version, "spawn")
    made = iter(created)
    return [
        job_services.BulkSubmission(None, None, False, refused=refused) if refused else next(made)
        for refused in refusals
    ]


def spawn_refusals(jobs: list[dict], *, correlation_id: str) -> list[str]:
    """Why each child of a fan-out would be refused ('' for none), by the checks its creation makes
    (its type and payload, then every field): one bad child is reported on its own, never fails its
    parent and its siblings. A dry run asks the same question, so it refuses what the real run does."""
    refusals = []
    for job in jobs:
        try:
            declared, pool = _declared(job["job_type"], job["payload"])
            job_services.job_check(
                type=job["job_type"],
                idempotency_key=job["idempotency_key"],
                payload=job["payload"],
                priority=declared.default_priority if job.get("priority") is None else job["priority"],
                max_attempts=declared.retry.max_attempts,
                correlation_id=correlation_id,
                source=job.get("source", ""),
                schema_version=declared.schema_version,
                pool=pool,
            )
        except JobInputError as refused:
            refusals.append(str(refused))
        else:
            refusals.append("")
    return refusals


def _wake_after_commit(prepared: list[dict], submitted: list[job_services.BulkSubmission]) -> None:
    for pool in sorted({row["pool"] for row, done in zip(prepared, submitted) if done.created}):
        dispatch.wakeup_after_commit(pool)


def _prepared(jobs: list[dict], *, client: Client | None = None, given_subjects: bool = False) -> list[dict]:
    """Each job's registered type checked (its payload parsed) and its pool, priority, retry budget,
    schema version, subject and flow key filled in from the declaration; a refusal names
    ``jobs[i].field``. ``given_subjects``: a job's own ``subject`` stands where it has one (a handler
    that knows what its child is about spares the declaration's read: an analysis child's image URL)."""
    prepared = []
    for index, job in enumerate(jobs):
        try:
            declared, pool = _declared(job["job_type"], job["payload"], client=client)
        except JobInputError as refused:
            raise JobInputError(f"jobs[{index}].{refused.field}", refused.message) from None
        prepared.append(
            {
                "type": job["job_type"],
                "pool": pool,
                "idempotency_key": job["idempotency_key"],
                "payload": job["payload"],
                "priority": declared.default_priority if job.get("priority") is None else job["priority"],
                "source": job.get("source", ""),
                "max_attempts": declared.retry.max_attempts,
                "schema_version": declared.schema_version,
                "request_hash": job.get("request_hash", ""),
                "subject": job["subject"]
                if given_subjects and job.get("subject")
                else declared.subject_of(job["payload"]),
                "flow_key_declaration": declared.flow_key,
            }
        )
    return prepared


@dataclass(frozen=True)
class BatchSubmission:
    batch: Batch
    created: bool
    job_ids: list  # the members submitted, in order (on a repeat: the batch's top-level jobs)


def batch_submit(
    *,
    key: str,
    name: str,
    jobs: list[dict],
    actor: str,
    correlation_id: str = "",
    target_finish_at: datetime | None = None,
    request: dict | None = None,
    client: Client | None = None,
) -> BatchSubmission:
    """Submit many jobs as one batch, in one transaction (all or nothing). Each job is a dict of
    ``job_submit``'s arguments (``job_type``, ``payload``, ``idempotency_key``, ``priority``, ``source``,
    ``request_hash``); ``client`` owns the batch and its jobs, whose keys live in its namespace.
    The same key with the same ``request`` returns the existing batch; a job whose idempotency key
    names a job of another batch is refused (``JobInputError`` on ``jobs[i].idempotency_key``)."""
    with transaction.atomic():
        batch, created = batch_create(
            key=key,
            name=name,
            created_by=actor,
            correlation_id=correlation_id,
            target_finish_at=target_finish_at,
            request=request,
            key_namespace=client.key_namespace if client else "",
            client_id=client.pk if client else None,
        )
        if not created:
            members = Job.objects.filter(batch=batch, parent__isnull=True).order_by("created_at", "id")
            return BatchSubmission(batch, False, list(members.values_list("id", flat=True)))
        submitted = jobs_submit_many(
            jobs, actor=actor, correlation_id=batch.correlation_id, batch_id=batch.pk, client=client
        )
        for index, submission in enumerate(submitted):
            if submission.batch_id != batch.pk:
                raise JobInputError(
                    f"jobs[{index}].idempotency_key", f"names job {submission.job_id}, which is not in this batch"
                )
    return BatchSubmission(batch, True, [submission.job_id for submission in submitted])


def pool_pause(*, pool: str, actor: str, reason: str, user=None) -> Pool:
    """Stop waking the pool: running jobs finish, nothing new is claimed until it is resumed.
    ``user``: the person acting (their operator permission is checked); None for trusted callers."""
    return _pool_set(pool=pool, is_paused=True, actor=actor, reason=reason, user=user)


def pool_resume(*, pool: str, actor: str, reason: str = "resumed", user=None) -> Pool:
    resumed = _pool_set(pool=pool, is_paused=False, actor=actor, reason=reason, user=user)
    dispatch.wakeup_after_commit(pool)
    return resumed


def _pool_set(*, pool: str, is_paused: bool, actor: str, reason: str, user) -> Pool:
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to pause or resume pools")
    if refusal := options.current().pool_refusal(pool):
        raise JobInputError("pool", refusal)
    if not reason or not reason.strip():
        raise JobInputError("reason", "is required")
    Pool.objects.update_or_create(
        name=pool,
        defaults={
            "is_paused": is_paused,
            "changed_by": actor[:255],
            "reason": reason[:500],
            "changed_at": LeitstandNow(),
        },
    )
    return Pool.objects.get(name=pool)
