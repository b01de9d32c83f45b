"""W3C trace context through jobs: the trace a job was created in, and the trace current while it runs.

A job stores the ``traceparent`` and ``tracestate`` that were current when it was created: an API
request's (the caller's headers), a handler's for the children it spawns (the runtime makes its job's
context current while the job runs), none for the system's own producers outside any trace. The
context is read and written through OpenTelemetry's API and its W3C propagator, so an invalid header
is ignored as the specification asks, never an error, and once an SDK records spans the context a job
stores is the span that created it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator = TraceContextTextMapPropagator()
# What a job keeps of a ``tracestate`` (W3C: a vendor should propagate at least 512 characters);
# a longer one is not kept at all rather than cut inside a member.
TRACESTATE_MAX = 512


def current() -> tuple[str, str]:
    """The current trace context as (traceparent, tracestate); ('', '') outside any trace."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    state = carrier.get("tracestate", "")
    return carrier.get("traceparent", ""), state if len(state) <= TRACESTATE_MAX else ""


@contextmanager
def attached(traceparent: str, tracestate: str = "") -> Iterator[None]:
    """Make the context of ``traceparent`` (and ``tracestate``) current inside the block; an empty or
    invalid one changes nothing."""
    if not traceparent:
        yield
        return
    token = otel_context.attach(_propagator.extract({"traceparent": traceparent, "tracestate": tracestate}))
    try:
        yield
    finally:
        otel_context.detach(token)


def trace_id(traceparent: str) -> str:
    """The trace ID (32 lower-case hex digits) of a stored ``traceparent``; '' without one."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else ""
