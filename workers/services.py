"""Services of the workers app: submitting jobs of registered types, pausing and resuming pools."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from jobs import services as job_services
from jobs.models import LeitstandNow
from jobs.services import JobInputError, Submission
from workers import dispatch
from workers.models import Pool
from workers.registry import UnknownJobType, registry


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
) -> Submission:
    """Create a job of a registered type in its pool and wake the pool when the transaction commits."""
    try:
        declared = registry.get(job_type)
    except UnknownJobType as exc:
        raise JobInputError("type", str(exc)) from None
    pool = declared.pool
    if declared.may_choose_pool and isinstance(payload, dict) and payload.get("pool"):
        pool = payload["pool"]
        if pool not in settings.LEITSTAND_POOLS:
            raise JobInputError("payload.pool", f"unknown pool {pool!r}; pools: {', '.join(settings.LEITSTAND_POOLS)}")
    with transaction.atomic():
        submission = job_services.job_create(
            type=job_type, pool=pool, payload=payload, idempotency_key=idempotency_key, actor=actor,
            priority=declared.default_priority if priority is None else priority, correlation_id=correlation_id,
            source=source, due_at=due_at, parent_id=parent_id, max_attempts=declared.retry.max_attempts,
            schema_version=declared.schema_version,
        )
        if submission.created:
            dispatch.wakeup_after_commit(pool)
    return submission


def pool_pause(*, pool: str, actor: str, reason: str) -> Pool:
    """Stop waking the pool: running jobs finish, nothing new is claimed until it is resumed."""
    return _pool_set(pool=pool, is_paused=True, actor=actor, reason=reason)


def pool_resume(*, pool: str, actor: str, reason: str = "resumed") -> Pool:
    resumed = _pool_set(pool=pool, is_paused=False, actor=actor, reason=reason)
    dispatch.wakeup_after_commit(pool)
    return resumed


def _pool_set(*, pool: str, is_paused: bool, actor: str, reason: str) -> Pool:
    if pool not in settings.LEITSTAND_POOLS:
        raise JobInputError("pool", f"unknown pool {pool!r}; pools: {', '.join(settings.LEITSTAND_POOLS)}")
    if not reason or not reason.strip():
        raise JobInputError("reason", "is required")
    Pool.objects.update_or_create(name=pool, defaults={
        "is_paused": is_paused, "changed_by": actor[:255], "reason": reason[:500], "changed_at": LeitstandNow(),
    })
    return Pool.objects.get(name=pool)
