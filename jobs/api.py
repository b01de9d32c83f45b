"""REST API v1 for the PHP core (django-ninja, OpenAPI at /api/v1/openapi.json, docs at /api/v1/docs).

Every answer that is not a success is ``application/problem+json`` (RFC 9457): type, title, status,
detail and, for invalid input, the fields at fault. Authentication: ``Authorization: Bearer
<token>``; a missing, unknown, revoked or expired token → 401, a missing scope → 403.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from dataclasses import asdict
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Annotated, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.http import Http404, HttpResponse
from django_fsm import TransitionNotAllowed
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer
from pydantic import AfterValidator

from jobs.batches import batch_create, batch_eta, batch_progress
from jobs.models import Batch, Job, State, database_now
from jobs.services import IdempotencyConflict, JobInputError, job_cancel
from jobs.tokens import rate_count, token_check
from rechecks.models import RecheckPlan

PROBLEM = "application/problem+json"
logger = logging.getLogger("leitstand.api")


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


# Every text the API accepts: PostgreSQL text cannot hold NUL, so it is refused here with a 422.
Text = Annotated[str, AfterValidator(_without_nul)]


class RateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after:.0f} s")
        self.retry_after = retry_after


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        checked = token_check(token)
        if checked is not None:
            count, left = rate_count(checked)
            if count > settings.LEITSTAND_API_RATE_PER_MINUTE:
                raise RateLimited(left)
        return checked


PROBLEM_SCHEMA = {
    "title": "Problem",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "description": "RFC 9457 problem details.",
    "properties": {
        "type": {"type": "string", "description": "A URI reference naming the kind of problem."},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "invalid_fields": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}
PROBLEM_STATUSES = {
    "400": "Malformed JSON, or a cursor this API did not issue.",
    "401": "The bearer token is missing, unknown, revoked or expired.",
    "403": "The token lacks the scope this operation needs.",
    "404": "No such job or recheck plan.",
    "409": "The job or plan has already ended.",
    "413": "The body is over the configured limit (LEITSTAND_API_MAX_BODY_BYTES, default 1 MiB).",
    "422": "The request does not match the schema, the job type is unknown, the payload fails the type's "
    "schema, or the idempotency key names a job with another payload; see invalid_fields.",
    "429": "Over the token's rate limit; retry after the seconds in Retry-After.",
}


class LeitstandApi(NinjaAPI):
    """Declares the problem answers of every operation in the OpenAPI schema, as they are sent:
    ``application/problem+json`` (ninja would describe them as plain JSON)."""

    def get_openapi_schema(self, **kwargs):
        schema = super().get_openapi_schema(**kwargs)
        schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
        problem_content = {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                statuses = {"401", "403", "422", "429"}
                if method == "post":
                    statuses |= {"400", "413"}
                if "{" in path:
                    statuses.add("404")
                if path.endswith(("/cancel", "/decision")):
                    statuses.add("409")
                if method == "get" and path.endswith("/jobs"):
                    statuses.add("400")
                for status in sorted(statuses):
                    answer = {"description": PROBLEM_STATUSES[status], "content": problem_content}
                    if status == "429":
                        answer["headers"] = {
                            "Retry-After": {
                                "schema": {"type": "integer"},
                                "description": "Seconds until the next minute's window.",
                            }
                        }
                    operation.setdefault("responses", {})[status] = answer
        return schema


api = LeitstandApi(
    title="Leitstand API",
    version="1",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    docs_url="/docs",
    openapi_url="/openapi.json",
)


def problem(status: int, title: str, detail: str, *, kind: str = "about:blank", **extra) -> HttpResponse:
    body = {"type": kind, "title": title, "status": status, "detail": detail, **extra}
    return HttpResponse(json.dumps(body), status=status, content_type=PROBLEM)


def utc(moment: datetime | None, field: str) -> datetime | None:
    """A datetime in UTC (without an offset: taken as UTC), or 422 naming the field when it cannot be."""
    if moment is None:
        return None
    try:
        return moment.replace(tzinfo=dt_timezone.utc) if moment.tzinfo is None else moment.astimezone(dt_timezone.utc)
    except (OverflowError, ValueError):
        raise JobInputError(field, f"{moment.isoformat()} is outside the representable range in UTC") from None


def require(request, scope: str) -> None:
    if scope not in request.auth.scopes:
        raise HttpError(403, f"this token lacks the scope {scope}")


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc):
    return problem(
        401,
        "Unauthorized",
        "a valid, unexpired bearer token is required (Authorization: Bearer …)",
        kind="/problems/unauthorized",
    )


@api.exception_handler(RateLimited)
def _rate_limited(request, exc):
    response = problem(
        429,
        "Too Many Requests",
        f"this token may make {settings.LEITSTAND_API_RATE_PER_MINUTE} requests a minute; {exc}",
        kind="/problems/rate-limited",
    )
    response["Retry-After"] = str(max(int(exc.retry_after + 0.999), 1))
    return response


@api.exception_handler(HttpError)
def _http_error(request, exc):
    titles = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict", 413: "Payload Too Large"}
    return problem(exc.status_code, titles.get(exc.status_code, "Error"), str(exc.message))


@api.exception_handler(ValidationError)
def _invalid(request, exc):
    fields = []
    for error in exc.errors:
        path = [str(p) for p in error.get("loc", [])]
        while path and path[0] in ("body", "path", "query"):  # ninja's source and parameter names
            path.pop(0)
        fields.append({"field": ".".join(path) or "body", "message": error.get("msg", "")})
    return problem(
        422,
        "Invalid request",
        "the request does not match the schema; see invalid_fields",
        kind="/problems/invalid-request",
        invalid_fields=fields,
    )


@api.exception_handler(JobInputError)
def _job_input(request, exc):
    return problem(
        422,
        "Invalid job",
        exc.message,
        kind="/problems/invalid-job",
        invalid_fields=[{"field": exc.field, "message": exc.message}],
    )


@api.exception_handler(IdempotencyConflict)
def _conflict(request, exc):
    return problem(
        422,
        "Idempotency key reused",
        str(exc),
        kind="/problems/idempotency-conflict",
        invalid_fields=[{"field": "idempotency_key", "message": "names a job with a different payload"}],
    )


@api.exception_handler(Http404)
def _not_found(request, exc):
    return problem(404, "Not Found", str(exc) or "no such resource")


class JobIn(Schema):
    type: Text = Field(max_length=64)
    payload: dict[str, Any]
    idempotency_key: Text = Field(max_length=255)
    priority: int | None = Field(default=None, ge=0, le=9)
    correlation_id: Text | None = Field(default=None, max_length=255)
    source: Text = Field(default="", max_length=255)
    due_at: datetime | None = None


class TransitionOut(Schema):
    from_state: str
    to_state: str
    at: datetime
    lease_version: int
    cause: str
    actor: str


class FindingOut(Schema):
    id: int
    image_url: str
    page_url: str
    asset_id: int
    asset_owner_ref: str
    score: float
    verdict: str
    analysis_version: str
    created_at: datetime


class ObservationOut(Schema):
    sequence: int
    observed_at: datetime
    http_status: int | None
    kind: str
    match_score: float | None
    content_hash: str
    decision: str
    next_check_at: datetime | None


class RecheckPlanOut(Schema):
    id: int
    job_id: uuid.UUID
    correlation_id: str
    url: str
    target: str
    state: str
    sequence: int
    next_check_at: datetime | None
    next_check_reason: str
    deadline_at: datetime
    end_reason: str
    end_note: str
    ended_by: str
    ended_at: datetime | None
    observations: list[ObservationOut] = []


class DecisionIn(Schema):
    reason: Text = Field(min_length=1, max_length=400)


class JobOut(Schema):
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
    transitions: list[TransitionOut] = []
    findings: list[FindingOut] = []
    recheck_plan: RecheckPlanOut | None = None


_RELATED = {"attempt", "transitions", "findings", "recheck_plan"}


def job_out(job: Job, *, with_transitions: bool) -> dict:
    data = {field: getattr(job, field) for field in JobOut.model_fields if field not in _RELATED}
    data.update(attempt=job.lease_version, transitions=[], findings=[], recheck_plan=None)
    if with_transitions:  # the single-job record: its transitions, findings and recheck plan too
        data["transitions"] = list(
            job.transitions.order_by("id").values("from_state", "to_state", "at", "lease_version", "cause", "actor")
        )
        data["findings"] = [finding_out(f) for f in job.findings.select_related("candidate", "asset").order_by("id")]
        plan = RecheckPlan.objects.filter(job=job).first()
        data["recheck_plan"] = plan_out(plan) if plan else None
    return data


def finding_out(finding) -> dict:
    return {
        "id": finding.pk,
        "image_url": finding.candidate.image_url,
        "page_url": finding.candidate.page_url,
        "asset_id": finding.asset_id,
        "asset_owner_ref": finding.asset.owner_ref,
        "score": finding.score,
        "verdict": finding.verdict,
        "analysis_version": finding.analysis_version,
        "created_at": finding.created_at,
    }


def plan_out(plan: RecheckPlan) -> dict:
    data = {field: getattr(plan, field) for field in RecheckPlanOut.model_fields if field != "observations"}
    data["id"] = plan.pk
    data["observations"] = list(plan.observations.order_by("sequence").values(*ObservationOut.model_fields))
    return data


@api.post("/jobs", response={200: JobOut, 201: JobOut})
def jobs_create(request, body: JobIn):
    """Submit a job. The same idempotency key with the same payload answers 200 with the first job; with
    another payload, 422. The job is committed before the answer."""
    from workers.services import job_submit

    require(request, "jobs:write")
    if body.type == "synthetic":
        require(request, "jobs:synthetic")
    correlation = body.correlation_id or request.META.get("HTTP_X_CORRELATION_ID", "")
    submission = job_submit(
        job_type=body.type,
        payload=body.payload,
        idempotency_key=body.idempotency_key,
        actor=f"api:{request.auth.name}",
        priority=body.priority,
        correlation_id=correlation,
        source=body.source,
        due_at=utc(body.due_at, "due_at"),
    )
    logger.info(
        "job %s (%s) %s by token %s",
        submission.job.pk,
        body.type,
        "created" if submission.created else "already submitted",
        request.auth.name,
    )
    return Status(201 if submission.created else 200, job_out(submission.job, with_transitions=True))


@api.get("/jobs/{job_id}", response=JobOut)
def jobs_get(request, job_id: uuid.UUID):
    require(request, "jobs:read")
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id}")
    return job_out(job, with_transitions=True)


class JobPage(Schema):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")


class CancelIn(Schema):
    reason: Text = Field(default="cancelled by the PHP core", min_length=1, max_length=400)


def _cursor_decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        moment, job_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        return datetime.fromisoformat(moment).astimezone(dt_timezone.utc), uuid.UUID(job_id)
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise HttpError(400, "cursor is not one this API issued") from None


@api.get("/jobs", response=JobPage)
def jobs_list(
    request,
    correlation_id: Text | None = None,
    type: Text | None = None,
    state: Text | None = None,
    updated_after: datetime | None = None,
    cursor: Text | None = None,
    limit: int = Query(50, ge=1, le=500),
):
    """Jobs in the order of their last state change (oldest first), keyset-paginated: a page never
    skips or repeats a job while others change."""
    require(request, "jobs:read")
    jobs = Job.objects.all()
    if correlation_id:
        jobs = jobs.filter(correlation_id=correlation_id)
    if type:
        jobs = jobs.filter(type=type)
    if state:
        if state not in State.values:
            raise HttpError(422, f"state must be one of {', '.join(State.values)}")
        jobs = jobs.filter(state=state)
    if updated_after:
        jobs = jobs.filter(state_changed_at__gt=utc(updated_after, "updated_after"))
    if cursor:
        moment, last_id = _cursor_decode(cursor)
        # (state_changed_at, id) > (moment, last_id), with the range on its own so the index serves it.
        jobs = jobs.filter(Q(state_changed_at__gt=moment) | Q(id__gt=last_id), state_changed_at__gte=moment)
    page = list(jobs.order_by("state_changed_at", "id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_cursor = None
    if more:
        last = page[-1]
        next_cursor = base64.urlsafe_b64encode(f"{last.state_changed_at.isoformat()}|{last.id}".encode()).decode()
    return {"items": [job_out(job, with_transitions=False) for job in page], "next_cursor": next_cursor}


@api.post("/jobs/{job_id}/cancel", response=JobOut)
def jobs_cancel(request, job_id: uuid.UUID, body: CancelIn | None = None):
    """Cancel a job that has not ended: 200 with the job; 409 when it already ended."""
    require(request, "jobs:write")
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id}")
    try:
        job = job_cancel(job_id=job_id, actor=f"api:{request.auth.name}", reason=(body or CancelIn()).reason)
    except TransitionNotAllowed:
        raise HttpError(409, f"job {job_id} is {Job.objects.get(pk=job_id).state}: it has already ended") from None
    logger.info("job %s cancelled by token %s", job_id, request.auth.name)
    return job_out(job, with_transitions=True)


@api.get("/rechecks/{plan_id}", response=RecheckPlanOut)
def rechecks_get(request, plan_id: int):
    require(request, "jobs:read")
    plan = RecheckPlan.objects.filter(pk=plan_id).first()
    if plan is None:
        raise Http404(f"no recheck plan {plan_id}")
    return plan_out(plan)


@api.post("/rechecks/{plan_id}/decision", response=RecheckPlanOut)
def rechecks_decide(request, plan_id: int, body: DecisionIn):
    """End a recheck plan with a manual decision (the case is confirmed); 409 once the plan ended."""
    from rechecks.services import plan_decide

    require(request, "reviews:write")
    if not RecheckPlan.objects.filter(pk=plan_id).exists():
        raise Http404(f"no recheck plan {plan_id}")
    try:
        plan = plan_decide(plan_id=plan_id, actor=f"api:{request.auth.name}", reason=body.reason)
    except JobInputError as refused:
        if refused.field == "plan":
            raise HttpError(409, refused.message) from None
        raise
    return plan_out(plan)


# --- batches -----------------------------------------------------------------------------------------


class BatchJobIn(Schema):
    type: Text = Field(max_length=64)
    payload: dict[str, Any]
    idempotency_key: Text = Field(max_length=255)
    priority: int | None = Field(default=None, ge=0, le=9)
    source: Text = Field(default="", max_length=255)


class BatchIn(Schema):
    key: Text = Field(min_length=1, max_length=255, description="One batch per key: a repeat answers 200.")
    name: Text = Field(min_length=1, max_length=200)
    target_finish_at: datetime | None = None
    correlation_id: Text | None = Field(default=None, max_length=255)
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


def batch_record(batch, *, job_ids=()) -> dict:
    progress = batch_progress(batch.pk)
    eta = batch_eta(batch, progress, database_now())
    return {
        "id": batch.pk,
        "key": batch.key,
        "name": batch.name,
        "correlation_id": batch.correlation_id,
        "created_by": batch.created_by,
        "created_at": batch.created_at,
        "target_finish_at": batch.target_finish_at,
        "finished_at": batch.finished_at,
        "state": "finished" if batch.finished_at else "running",
        "counters": asdict(progress),
        "ended": progress.ended,
        "rate_per_minute": round(eta["rate_per_minute"], 3),
        "eta": eta["eta"],
        "misses_target": eta["misses_target"],
        "stats": batch.stats,
        "job_ids": list(job_ids),
    }


@api.post("/batches", response={200: BatchOut, 201: BatchOut})
def batches_create(request, body: BatchIn):
    """Submit many jobs as one batch, in one transaction. The same key with the same contents answers
    200 with the batch; with other contents, 422. A job whose idempotency key names a job of another
    batch is refused (422), and nothing is created."""
    from workers.services import job_submit

    require(request, "jobs:write")
    if any(job.type == "synthetic" for job in body.jobs):
        require(request, "jobs:synthetic")
    actor = f"api:{request.auth.name}"
    correlation = body.correlation_id or request.META.get("HTTP_X_CORRELATION_ID", "")
    with transaction.atomic():
        batch, created = batch_create(
            key=body.key,
            name=body.name,
            created_by=actor,
            correlation_id=correlation,
            target_finish_at=utc(body.target_finish_at, "target_finish_at"),
            request=body.model_dump(mode="json"),
        )
        if not created:
            job_ids = list(
                Job.objects.filter(batch=batch, parent__isnull=True)
                .order_by("created_at", "id")
                .values_list("id", flat=True)
            )
            return Status(200, batch_record(batch, job_ids=job_ids))
        job_ids = []
        for index, job in enumerate(body.jobs):
            try:
                submission = job_submit(
                    job_type=job.type,
                    payload=job.payload,
                    idempotency_key=job.idempotency_key,
                    actor=actor,
                    priority=job.priority,
                    correlation_id=batch.correlation_id,
                    source=job.source,
                    batch_id=batch.pk,
                )
            except JobInputError as refused:
                raise JobInputError(f"jobs[{index}].{refused.field}", refused.message) from None
            if submission.job.batch_id != batch.pk:
                raise JobInputError(
                    f"jobs[{index}].idempotency_key", f"names job {submission.job.pk}, which is not in this batch"
                )
            job_ids.append(submission.job.pk)
    logger.info("batch %s (%s, %d jobs) created by token %s", batch.pk, batch.key, len(job_ids), request.auth.name)
    return Status(201, batch_record(batch, job_ids=job_ids))


@api.get("/batches/{batch_id}", response=BatchOut)
def batches_get(request, batch_id: int):
    """A batch's live counters, rate and ETA; its statistics once finished."""
    require(request, "jobs:read")
    batch = Batch.objects.filter(pk=batch_id).first()
    if batch is None:
        raise Http404(f"no batch {batch_id}")
    return batch_record(batch)
