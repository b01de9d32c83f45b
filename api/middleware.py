"""Limits and correlation for the REST API (paths under /api/)."""

from __future__ import annotations

import uuid

from api import options
from api.errors import problem
from api.tokens import token_trusts_trace
from jobs import logs, tracing


class ApiRequestMiddleware:
    """A body over ``LEITSTAND_API_MAX_BODY_BYTES`` is refused with 413 before anything reads it; every
    request gets an ``X-Correlation-ID`` (the caller's, or a new one), which is echoed in the answer."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        sent = request.headers.get("X-Correlation-ID", "").strip()
        if len(sent) > 255 or not (sent.isprintable() and sent.isascii()):  # into logs and webhook headers
            message = "must be at most 255 printable ASCII characters (no line breaks or control characters)"
            return problem(
                422,
                "Invalid request",
                f"the X-Correlation-ID header {message}",
                kind="/problems/invalid-request",
                invalid_fields=[{"field": "X-Correlation-ID", "message": message}],
            )
        correlation = sent or str(uuid.uuid4())
        request.META["HTTP_X_CORRELATION_ID"] = correlation
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = options.current().max_body_bytes
        if length > limit:
            response = problem(
                413,
                "Payload Too Large",
                f"the body is {length} bytes; the limit is {limit}",
                kind="/problems/payload-too-large",
            )
        else:
            # The caller's W3C trace context (an invalid one is ignored) is current for the request, as
            # the parent of its server span when traces are recorded: the jobs it creates keep it
            # (jobs/tracing.py); the answer names it (Trace Context Level 2). Only a token with
            # jobs:all, or of a client an operator trusts, joins it; any other caller's request starts
            # a new trace linked to the one it sent (one statement more, asked only of a valid one).
            with (
                tracing.attached(
                    request.headers.get("traceparent", ""),
                    request.headers.get("tracestate", ""),
                    trusted=lambda: _trace_trusted(request),
                ),
                tracing.server_span(request) as span,
            ):
                traceparent, _ = tracing.current()
                with logs.bound(
                    correlation_id=correlation,
                    trace_id=tracing.trace_id(traceparent),
                    linked_trace_id=tracing.linked_trace_id(),
                ):
                    response = self.get_response(request)
                tracing.served(span, request, response.status_code)
            if traceparent:
                response["traceresponse"] = traceparent
        response["X-Correlation-ID"] = correlation
        if hasattr(request, "rate_limit"):  # the token's request budget (IETF RateLimit header fields)
            limit, remaining, reset = request.rate_limit
            response["RateLimit-Limit"] = str(limit)
            response["RateLimit-Remaining"] = str(remaining)
            response["RateLimit-Reset"] = str(max(int(reset + 0.999), 1))
        return response


def _trace_trusted(request) -> bool:
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(secret) and token_trusts_trace(secret.strip())
