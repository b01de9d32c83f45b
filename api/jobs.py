"""The jobs resource: submit, read, list (keyset-paginated) and cancel jobs."""

from __future__ import annotations

import base64
import logging
import uuid
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any, Literal

from django.http import Http404
from django_fsm import TransitionNotAllowed
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import BaseModel, StrictInt

from api.auth import TokenAuth, lane_allow, may_act_for, owned, request_fingerprint, require, submittable_require
from api.backpressure import lane_check, open_jobs_check
from api.fields import HeaderText, Moment, Text, due_at_check, utc
from api.rechecks import RecheckPlanOut
from jobs import tracing
from jobs.models import Attempt, Job, State
from jobs.records import JobRecord, job_record
from jobs.selectors import jobs_page
from jobs.services import JobInputError, job_cancel, job_hold, job_reorder, job_resume
from workers.runtime.registry import registry
from workers.runtime.services import job_submit

logger = logging.getLogger("leitstand.api")
router = Router(tags=["jobs"])


class JobIn(Schema):
    type: Text = Field(max_length=64)
    payload: dict[str, Any]
    idempotency_key: Text = Field(max_length=255)
    priority: StrictInt | None = Field(default=None, ge=0, le=9)
    correlation_id: HeaderText | None = Field(default=None, max_length=255)
    source: Text = Field(default="", max_length=255)
    due_at: Moment | None = None


# The answers' records are plain pydantic models, not django-ninja's ``Schema``: they are built as
# dicts (``job_out``) and validated as they are, where a ``Schema`` wraps each in its ``DjangoGetter``
# for attribute lookups (1,550 of them for a page of 50 jobs, ~2 ms; docs/performance.md).
class TransitionOut(BaseModel):
    from_state: str
    to_state: str
    at: datetime
    lease_version: int
    cause: str
    actor: str


class FindingOut(BaseModel):
    id: int
    image_url: str
    page_url: str
    found_in: str = Field(
        description="Where the page showed the image: an attribute (`img srcset`), a meta tag (`meta og:image`), "
        "`json-ld`, CSS (`css <style>`), `sitemap image:loc`, … ('' for images found before this was recorded)."
    )
    asset_id: int | None  # None: no original lies near the image at all
    asset_owner_ref: str
    score: float
    verdict: str
    analysis_version: str
    created_at: datetime


class LogLineOut(BaseModel):
    """A line as the attempt kept it, without its traceback: that names the handler's code and files,
    which are the operators' to read (on the job page and in ``export_job``), not a client's."""

    at: datetime
    level: str
    logger: str
    message: str


class AttemptLogOut(BaseModel):
    attempt: int = Field(description="The attempt's lease version (as `attempt` of the job record).")
    outcome: str
    lines: list[LogLineOut]
    dropped: int = Field(description="Lines the attempt wrote beyond what one attempt keeps.")


class JobOut(BaseModel):
    id: uuid.UUID
    type: str
    state: str
    pool: str
    idempotency_key: str
    correlation_id: str
    parent_id: uuid.UUID | None
    schema_version: int
    processing_version: str
    priority: int
    source: str
    subject: str = Field(description="What the job is about, as its type declares it (crawl, analysis: the URL).")
    payload: dict[str, Any]
    created_at: datetime
    due_at: datetime
    state_changed_at: datetime
    finished_at: datetime | None
    lease_owner: str
    attempt: int = Field(description="The lease version: the ID of the current or latest attempt.")
    heartbeat_at: datetime | None
    attempts: int
    max_attempts: int
    next_attempt_at: datetime | None
    result_ref: str
    result_checksum: str
    error_class: str
    error_message: str
    completion_reason: str
    trace_id: str = Field(
        description="The W3C trace ID of the trace it was created in: the submission's `traceparent`, its "
        "parent's for a sub-job; empty without one."
    )
    transitions: list[TransitionOut] = []
    findings: list[FindingOut] = []
    recheck_plan: RecheckPlanOut | None = None
    logs: list[AttemptLogOut] | None = Field(
        default=None,
        description="With `?include=logs`: the log lines each attempt kept (its handler's warnings and "
        "errors, and as many info lines as its type keeps), oldest attempt first; null otherwise.",
    )


_RELATED = {"attempt", "trace_id", "transitions", "findings", "recheck_plan", "logs"}


# What a job's read shows of its record (jobs/records.py), read with the job in one statement.
RECORD_PARTS = ("transitions", "findings", "recheck_plan")


def job_read(job_id: uuid.UUID) -> JobRecord | None:
    """One job's record with its transitions, findings and recheck plan."""
    return job_record(job_id, parts=RECORD_PARTS)


def job_out(job: Job | JobRecord, *, with_transitions: bool) -> dict:
    """A job as the API shows it; ``with_transitions``: the single-job record, with its transitions,
    findings and recheck plan (its record, read by ``job_read`` when ``job`` is the job alone)."""
    record = job if isinstance(job, JobRecord) else None
    job = record.job if record is not None else job
    data = {field: getattr(job, field) for field in JobOut.model_fields if field not in _RELATED}
    data.update(
        attempt=job.lease_version,
        trace_id=tracing.trace_id(job.trace_parent),
        transitions=[],
        findings=[],
        recheck_plan=None,
        logs=None,
    )
    if not with_transitions:
        return data
    record = record if record is not None else job_read(job.pk)
    data.update({part: record[part] for part in RECORD_PARTS})
    return data


def _visible(request):
    """The jobs this token may see: its client's (``owned``), never the system's own deliveries."""
    return owned(request, Job.objects.exclude(type__in=registry.system_only()))


def _may_see(request, job: Job) -> bool:
    """Whether this token may see ``job`` (read without ``_visible``): the same rule for one job."""
    return job.type not in registry.system_only() and may_act_for(request, job.client_id)


@router.post("/jobs", response={200: JobOut, 201: JobOut}, auth=TokenAuth(jobs=1), summary="Submit a job")
def jobs_create(request, body: JobIn):
    """Submit a job of a type clients submit. The same idempotency key with the same request answers 200
    with the first job; with any difference (payload, priority, source, due time, correlation ID), 422.
    Keys live in this client's own namespace. The job is committed before the answer."""
    require(request, "jobs:write")
    submittable_require(request, body.type, field="type")  # its one job was counted with the request
    correlation = body.correlation_id or request.META.get("HTTP_X_CORRELATION_ID", "")
    due_at = due_at_check(utc(body.due_at, "due_at"))
    client = request.auth.client

    def repeat() -> bool:
        return Job.objects.filter(
            type=body.type, key_namespace=client.key_namespace if client else "", idempotency_key=body.idempotency_key
        ).exists()

    lane_allow(client, body.priority, field="priority")
    lane_check(body.type, body.priority, client=client, repeat=repeat)
    open_jobs_check(client, 1, pool=registry.get(body.type).pool, repeat=repeat)
    submission = job_submit(
        client=request.auth.client,
        request_hash=request_fingerprint(
            {
                "type": body.type,
                "payload": body.payload,
                "priority": body.priority,
                "correlation_id": body.correlation_id,  # as sent: a generated one differs per request
                "source": body.source,
                "due_at": due_at.isoformat() if due_at else None,
            }
        ),
        job_type=body.type,
        payload=body.payload,
        idempotency_key=body.idempotency_key,
        actor=f"api:{request.auth.name}",
        priority=body.priority,
        correlation_id=correlation,
        source=body.source,
        due_at=due_at,
    )
    logger.info(
        "job %s (%s) %s by token %s",
        submission.job.pk,
        body.type,
        "created" if submission.created else "already submitted",
        request.auth.name,
    )
    return Status(
        201 if submission.created else 200,
        job_out(submission.job, with_transitions=True),
    )


@router.get("/jobs/{job_id}", response=JobOut, summary="Read a job with its history")
def jobs_get(request, job_id: uuid.UUID, include: Literal["logs"] | None = None):
    """One job of this client (any job with ``jobs:all``) with its transitions, findings and recheck
    plan; with ``include=logs`` also the log lines its attempts kept (without tracebacks)."""
    require(request, "jobs:read")
    record = job_read(job_id)
    if record is None or not _may_see(request, record.job):
        raise Http404(f"no job {job_id}")
    data = job_out(record, with_transitions=True)
    if include == "logs":
        data["logs"] = [
            {
                "attempt": lease_version,
                "outcome": outcome,
                "lines": [{name: line[name] for name in LogLineOut.model_fields} for line in kept["lines"]],
                "dropped": kept["dropped"],
            }
            for lease_version, outcome, kept in Attempt.objects.filter(job=job_id, log_lines__isnull=False)
            .order_by("lease_version")
            .values_list("lease_version", "outcome", "log_lines")
        ]
    return data


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")


class CancelIn(Schema):
    reason: Text = Field(default="cancelled by the PHP core", min_length=1, max_length=400)


class HoldIn(Schema):
    reason: Text = Field(min_length=1, max_length=400, description="Why (required; on the job's history).")


class MoveIn(Schema):
    priority: StrictInt | None = Field(default=None, ge=0, le=9, description="The lane: 0 most urgent, 9 bulk.")
    due_at: Moment | None = Field(default=None, description="Not claimed before this time; now or later.")
    reason: Text = Field(default="moved by the PHP core", min_length=1, max_length=400)


def _cursor_decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        moment, job_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        return datetime.fromisoformat(moment).astimezone(dt_timezone.utc), uuid.UUID(job_id)
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise HttpError(400, "cursor is not one this API issued") from None


@router.get("/jobs", response=JobPage, summary="List this client's jobs")
def jobs_list(
    request,
    correlation_id: Text | None = None,
    type: Text | None = None,
    state: Text | None = None,
    subject: Text | None = None,
    updated_after: Moment | None = None,
    cursor: Text | None = None,
    limit: int = Query(50, ge=1, le=500),
):
    """This client's jobs (every job with ``jobs:all``) in the order of their last state change (oldest
    first), keyset-paginated: a page never skips or repeats a job while others change. ``subject``
    is a prefix of what the jobs are about (a URL: ``https://shop.example/`` finds every job of it)."""
    require(request, "jobs:read")
    if state and state not in State.values:
        raise HttpError(422, f"state must be one of {', '.join(State.values)}")
    page, more = jobs_page(
        _visible(request),
        correlation_id=correlation_id,
        job_type=type,
        subject=subject,
        state=state,
        updated_after=utc(updated_after, "updated_after") if updated_after else None,
        after=_cursor_decode(cursor) if cursor else None,
        limit=limit,
    )
    next_cursor = None
    if more:
        last = page[-1]
        next_cursor = base64.urlsafe_b64encode(f"{last.state_changed_at.isoformat()}|{last.id}".encode()).decode()
    return {"items": [job_out(job, with_transitions=False) for job in page], "next_cursor": next_cursor}


@router.post("/jobs/{job_id}/move", response=JobOut, summary="Move a waiting job in line")
def jobs_move(request, job_id: uuid.UUID, body: MoveIn):
    """Move a job of this client that waits in line (planned) to another lane or due time (either, or
    both): 200 with the job; 409 when it no longer waits (it started, ended, or waits for its retry)."""
    require(request, "jobs:write")
    job = _visible(request).filter(pk=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id}")
    actor = f"api:{request.auth.name}"
    due_at = due_at_check(utc(body.due_at, "due_at"))  # a client may not move a job ahead of its lane
    if body.priority is not None and body.priority != job.priority:
        lane_allow(request.auth.client, body.priority, field="priority")
        # Into the bulk lane is like a submission to it: not while it is full.
        lane_check(job.type, body.priority, client=request.auth.client, repeat=lambda: False)
    try:
        job_reorder(job_id=job.pk, actor=actor, reason=body.reason, priority=body.priority, due_at=due_at)
    except JobInputError as refused:
        if refused.field == "job":  # it no longer waits in line
            raise HttpError(409, f"job {job_id}: {refused.message}") from None
        raise
    logger.info(
        "job %s moved by token %s (lane %s, due %s): %s", job_id, request.auth.name, body.priority, due_at, body.reason
    )
    return job_out(job_read(job_id), with_transitions=True)


@router.post("/jobs/{job_id}/hold", response=JobOut, summary="Hold a waiting job")
def jobs_hold(request, job_id: uuid.UUID, body: HoldIn):
    """Hold a job of this client that waits in line (planned): no worker claims it until it is
    resumed; it keeps its due time. 200 with the job (state ``held``); 409 when it does not wait."""
    return _hold_or_resume(request, job_id, body, job_hold, "held")


@router.post("/jobs/{job_id}/resume", response=JobOut, summary="Resume a held job")
def jobs_resume(request, job_id: uuid.UUID, body: HoldIn):
    """Put a held job of this client back in line, at the place its due time gives it: 200 with the
    job (state ``planned``); 409 when it is not held."""
    return _hold_or_resume(request, job_id, body, job_resume, "resumed")


def _hold_or_resume(request, job_id: uuid.UUID, body: HoldIn, service, done: str):
    require(request, "jobs:write")
    job = _visible(request).filter(pk=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id}")
    if service is job_resume and job.state == State.HELD:
        # Back in line is like a submission: not into a full bulk lane (held jobs are not counted in
        # its depth, so holding and resuming cannot carry a client past the bound).
        lane_check(job.type, job.priority, client=request.auth.client, repeat=lambda: False)
    try:
        service(job_id=job.pk, actor=f"api:{request.auth.name}", reason=body.reason)
    except TransitionNotAllowed:
        state = Job.objects.get(pk=job_id).state
        raise HttpError(409, f"job {job_id} is {state}: it cannot be {done} now") from None
    logger.info("job %s %s by token %s: %s", job_id, done, request.auth.name, body.reason)
    return job_out(job_read(job_id), with_transitions=True)


@router.post("/jobs/{job_id}/cancel", response=JobOut, summary="Cancel a job")
def jobs_cancel(request, job_id: uuid.UUID, body: CancelIn | None = None):
    """Cancel a job that has not ended: 200 with the job; 409 when it already ended."""
    require(request, "jobs:write")
    job = _visible(request).filter(pk=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id}")
    try:
        job_cancel(job_id=job_id, actor=f"api:{request.auth.name}", reason=(body or CancelIn()).reason)
    except TransitionNotAllowed:
        raise HttpError(409, f"job {job_id} is {Job.objects.get(pk=job_id).state}: it has already ended") from None
    logger.info("job %s cancelled by token %s", job_id, request.auth.name)
    return job_out(job_read(job_id), with_transitions=True)
