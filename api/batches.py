"""The batch resource: submit many jobs as one batch, read its live counters, rate and ETA."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.http import Http404
from ninja import Field, Router, Schema, Status
from pydantic import BaseModel, StrictInt

from api.auth import jobs_budget_spend, lane_allow, owned, request_fingerprint, require, submittable_require
from api.backpressure import lane_check, open_jobs_check
from api.fields import HeaderText, Moment, Text, utc
from jobs.batches import batch_out, batch_progress
from jobs.models import Batch
from workers.runtime.registry import registry
from workers.runtime.services import batch_submit

logger = logging.getLogger("leitstand.api")
router = Router(tags=["batches"])


class BatchJobIn(BaseModel):
    """A plain pydantic model, not ninja's ``Schema``: a batch holds up to 1,000 of them, and the
    Schema's per-object resolver pass and attribute proxy cost 25 ms per 1,000 (issue 22)."""

    type: Text = Field(max_length=64)
    payload: dict[str, Any]
    idempotency_key: Text = Field(max_length=255)
    priority: StrictInt | None = Field(default=None, ge=0, le=9)
    source: Text = Field(default="", max_length=255)


class BatchIn(Schema):
    key: Text = Field(min_length=1, max_length=255, description="One batch per key: a repeat answers 200.")
    name: Text = Field(min_length=1, max_length=200)
    target_finish_at: Moment | None = None
    correlation_id: HeaderText | None = Field(default=None, max_length=255)
    jobs: list[BatchJobIn] = Field(min_length=1, max_length=1000)


class BatchCountersOut(Schema):
    total: int
    done: int
    failed: int
    dead: int
    in_review: int
    rechecking: int
    cancelled: int


class BatchOut(Schema):
    id: int
    key: str
    name: str
    correlation_id: str
    created_by: str
    created_at: datetime
    target_finish_at: datetime | None
    finished_at: datetime | None
    state: str = Field(description="running, or finished once every member ended or was handed over")
    counters: BatchCountersOut
    ended: int
    rate_per_minute: float = Field(description="Members ended per minute over the last 15 minutes.")
    eta: datetime | None
    misses_target: bool
    stats: dict[str, Any] = Field(description="Set at finalization: duration, throughput, failure rate.")
    job_ids: list[uuid.UUID] = Field(default=[], description="The members submitted (on POST only).")


@router.post("/batches", response={200: BatchOut, 201: BatchOut}, summary="Submit a batch of jobs")
def batches_create(request, body: BatchIn):
    """Submit many jobs as one batch, in one transaction. The same key with the same contents answers
    200 with the batch; with other contents, 422. A job whose idempotency key names a job of another
    batch is refused (422), and nothing is created."""
    require(request, "jobs:write")
    for index, job in enumerate(body.jobs):
        submittable_require(request, job.type, field=f"jobs[{index}].type")
    jobs_budget_spend(request, len(body.jobs))
    client = request.auth.client

    def repeat() -> bool:
        return Batch.objects.filter(key_namespace=client.key_namespace if client else "", key=body.key).exists()

    for index, job in enumerate(body.jobs):
        lane_allow(client, job.priority, field=f"jobs[{index}].priority")
    for job in body.jobs:  # a batch with a member for a full bulk lane is refused whole: nothing created
        lane_check(job.type, job.priority, client=client, repeat=repeat)
    if body.jobs:  # one more than its bound of open jobs, and the batch is refused whole
        open_jobs_check(client, len(body.jobs), pool=registry.get(body.jobs[0].type).pool, repeat=repeat)
    submitted = batch_submit(
        client=request.auth.client,
        key=body.key,
        name=body.name,
        jobs=[
            {
                "job_type": job.type,
                "payload": job.payload,
                "idempotency_key": job.idempotency_key,
                "priority": job.priority,
                "source": job.source,
                "request_hash": request_fingerprint(
                    {"type": job.type, "payload": job.payload, "priority": job.priority, "source": job.source}
                ),
            }
            for job in body.jobs
        ],
        actor=f"api:{request.auth.name}",
        correlation_id=body.correlation_id or request.META.get("HTTP_X_CORRELATION_ID", ""),
        target_finish_at=utc(body.target_finish_at, "target_finish_at"),
        request=body.model_dump(mode="json"),
    )
    if submitted.created:
        logger.info(
            "batch %s (%s, %d jobs) created by token %s",
            submitted.batch.pk,
            submitted.batch.key,
            len(submitted.job_ids),
            request.auth.name,
        )
    return Status(201 if submitted.created else 200, batch_record(submitted.batch, job_ids=submitted.job_ids))


@router.get("/batches/{batch_id}", response=BatchOut, summary="Read a batch's progress")
def batches_get(request, batch_id: int):
    """A batch's live counters, rate and ETA; its statistics once finished."""
    require(request, "jobs:read")
    batch = owned(request, Batch.objects).filter(pk=batch_id).first()
    if batch is None:
        raise Http404(f"no batch {batch_id}")
    return batch_record(batch)


def batch_record(batch: Batch, *, job_ids=()) -> dict:
    return {**batch_out(batch, batch_progress(batch.pk)), "job_ids": list(job_ids)}
