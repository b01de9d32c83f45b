"""The API's error answers: every answer that is not a success is ``application/problem+json``
(RFC 9457): type, title, status, detail and, for invalid input, the fields at fault."""

from __future__ import annotations

import json

from django.http import Http404, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from jobs.services import IdempotencyConflict, JobInputError

PROBLEM = "application/problem+json"


class LaneFull(Exception):
    """A submission to a pool's bulk lane while the lane holds its bound (api/backpressure.py)."""

    def __init__(self, pool: str, bound: int, retry_after: int) -> None:
        super().__init__(
            f"the {pool} pool's bulk lane (priority 9) holds {bound:,} or more waiting jobs "
            f"(LEITSTAND_API_BULK_LANE_DEPTH); retry after {retry_after} s, or submit in a more urgent lane"
        )
        self.retry_after = retry_after


class OpenJobsFull(Exception):
    """A submission of a client that has its bound of open jobs (api/backpressure.py)."""

    def __init__(self, bound: int, retry_after: int) -> None:
        super().__init__(
            f"this client has {bound:,} or more open jobs (its bound: LEITSTAND_API_CLIENT_OPEN_JOBS, or its "
            f"own); nothing was created: retry after {retry_after} s, once some of them have ended"
        )
        self.retry_after = retry_after


class RateLimited(Exception):
    def __init__(self, retry_after: float, *, limit: str) -> None:
        super().__init__(f"{limit}; retry after {retry_after:.0f} s")
        self.retry_after = retry_after


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
    "409": "The job or plan is not in a state this operation applies to: it has already ended, or no longer "
    "waits in line (move, hold), or is not held (resume); or the test notification was confirmed already.",
    "413": "The body is over the configured limit (LEITSTAND_API_MAX_BODY_BYTES, default 1 MiB).",
    "422": "The request does not match the schema, the job type is unknown, the payload fails the type's "
    "schema, or the idempotency key names a job with another payload; see invalid_fields.",
    "429": "Over the token's rate limit, or the client has its bound of open jobs; retry after the seconds "
    "in Retry-After.",
    "503": "The pool's bulk lane is full (a submission, or a held job resumed, in priority 9); retry after the "
    "seconds in Retry-After, or submit in a more urgent lane.",
}


def problem(status: int, title: str, detail: str, *, kind: str = "about:blank", **extra) -> HttpResponse:
    body = {"type": kind, "title": title, "status": status, "detail": detail, **extra}
    return HttpResponse(json.dumps(body), status=status, content_type=PROBLEM)


def handlers_install(api: NinjaAPI) -> None:
    """Answer every error the endpoints and ninja raise as a problem."""

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
            str(exc),
            kind="/problems/rate-limited",
        )
        response["Retry-After"] = str(max(int(exc.retry_after + 0.999), 1))
        return response

    @api.exception_handler(OpenJobsFull)
    def _open_jobs_full(request, exc):
        response = problem(429, "Too Many Requests", str(exc), kind="/problems/too-many-open-jobs")
        response["Retry-After"] = str(exc.retry_after)
        return response

    @api.exception_handler(LaneFull)
    def _lane_full(request, exc):
        response = problem(503, "Service Unavailable", str(exc), kind="/problems/bulk-lane-full")
        response["Retry-After"] = str(exc.retry_after)
        return response

    @api.exception_handler(HttpError)
    def _http_error(request, exc):
        titles = {
            400: "Bad Request",
            403: "Forbidden",
            404: "Not Found",
            409: "Conflict",
            413: "Payload Too Large",
            422: "Unprocessable Content",
        }
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
