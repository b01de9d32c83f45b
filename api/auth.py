"""Authentication of API clients: ``Authorization: Bearer <token>``; a missing, unknown, revoked or
expired token → 401, a missing scope → 403, over the token's rate → 429. Three budgets per minute:
requests per token, jobs submitted per token, and invalid tokens presented per address. A request
with a valid token costs one statement for its check and both counts."""

from __future__ import annotations

import hashlib
import json

from ninja.errors import HttpError
from ninja.security import HttpBearer

from api import options
from api.client_ip import client_ip
from api.errors import RateLimited
from api.tokens import address_count, jobs_count, token_admit
from jobs import logs
from jobs.services import JobInputError
from workers.runtime.registry import UnknownJobType, registry


class TokenAuth(HttpBearer):
    """The token's check and its budget counts in one statement (``token_admit``). An operation that
    submits a known number of jobs declares it (``TokenAuth(jobs=1)``): they are counted with the
    request, against the jobs budget of a token that may write."""

    def __init__(self, *, jobs: int = 0) -> None:
        super().__init__()
        self.jobs = jobs

    def __call__(self, request):
        # django-ninja's own reading logs a value that is not "Bearer …" whole when DEBUG is on (a
        # Basic credential, a token sent with the wrong scheme): read here, nothing is logged.
        scheme, _, token = request.headers.get(self.header, "").partition(" ")
        if scheme.lower() != self.openapi_scheme or not token:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request, token):
        admitted = token_admit(token, jobs=self.jobs)
        if admitted is None:  # guessing tokens is limited per address
            count, left = address_count(client_ip(request))
            limit = options.current().unauthenticated_per_minute
            if count > limit:
                raise RateLimited(left, limit=f"this address may present {limit} invalid tokens a minute")
            return None
        limit, left = options.current().rate_per_minute, admitted.seconds_left
        request.rate_limit = (limit, max(limit - admitted.requests, 0), left)  # answered as RateLimit-* headers
        if admitted.requests > limit:
            raise RateLimited(left, limit=f"this token may make {limit} requests a minute")
        if self.jobs:
            _jobs_budget_check(admitted.jobs, left)
        logs.bind(token=admitted.token.name, client=admitted.token.client.name)  # on the request's log lines
        return admitted.token


def _jobs_budget_check(count: int, left: float) -> None:
    limit = options.current().jobs_per_minute
    if count > limit:
        raise RateLimited(left, limit=f"this token may submit {limit} jobs a minute ({count} this minute)")


def jobs_budget_spend(request, jobs: int) -> None:
    """Count ``jobs`` against the token's jobs per minute, for an operation whose number of jobs its
    body tells (one batch request may create 1,000)."""
    _jobs_budget_check(*jobs_count(request.auth, jobs))


def require(request, scope: str) -> None:
    if scope not in request.auth.scopes:
        raise HttpError(403, f"this token lacks the scope {scope}")


def submittable_require(request, job_type: str, *, field: str) -> None:
    """Only the types a client may submit, with the scope each needs: any other (an internal type,
    an unknown one) is refused with 422 naming ``field``; a missing scope with 403."""
    try:
        scope = registry.get(job_type).client_scope
    except UnknownJobType:
        scope = None
    if scope is None:
        names = ", ".join(t.name for t in registry.submittable())
        raise JobInputError(field, f"{job_type!r} is not a type clients submit; they submit: {names}")
    require(request, scope)


def lane_allow(client, priority: int | None, *, field: str) -> None:
    """Refuse (422 naming ``field``) a lane more urgent than the client's own most urgent one
    (``Client.most_urgent_lane``; 5 unless an operator granted more): lanes come before fair shares in
    the claim, so a client's own choice of lane 0 would otherwise buy it the pool ahead of every
    other client's work. None (the type's default lane, 5 or 9) always passes."""
    if client is not None and priority is not None and priority < client.most_urgent_lane:
        raise JobInputError(
            field,
            f"this client may use lanes {client.most_urgent_lane} to 9 (0 is the most urgent); "
            "an operator grants more urgent lanes on the client's console page",
        )


def owned(request, queryset, *, path: str = "client"):
    """What this token may see and act on: its client's own (``path`` leads to the owning client),
    or everything with the ``jobs:all`` scope. Anything else answers 404, as if it did not exist."""
    if "jobs:all" in request.auth.scopes:
        return queryset
    return queryset.filter(**{path: request.auth.client_id})


def may_act_for(request, client_id: int | None) -> bool:
    """``owned`` for one record already read: whether it belongs to this token's client (or the
    token has ``jobs:all``)."""
    return "jobs:all" in request.auth.scopes or client_id == request.auth.client_id


def request_fingerprint(submission: dict) -> str:
    """The fingerprint of a whole submission (everything but the key): a repeat under the same key
    must be the same request, or it is refused (as the IETF Idempotency-Key draft and Stripe do)."""
    return hashlib.sha256(json.dumps(submission, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
