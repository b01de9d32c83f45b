"""W3C trace context through jobs, and the spans of requests, attempts, steps and HTTP calls.

A job stores the ``traceparent`` and ``tracestate`` that were current when it was created: an API
request's (the caller's headers), a handler's for the children it spawns (the runtime makes its job's
context current while the job runs), none for the system's own producers outside any trace. The
context is read and written through OpenTelemetry's API and its W3C propagator, so an invalid header
is ignored as the specification asks, never an error, and once an SDK records spans the context a job
stores is the span that created it.

Spans are recorded only when the standard ``OTEL_*`` environment names a collector
(``configure_from_environment``): a request a SERVER span (``server_span``), an attempt a CONSUMER
span (``attempt``), a step an INTERNAL one (``span``), an HTTP call a CLIENT one (``client_span``),
and with ``LEITSTAND_TRACE_DATABASE`` each SQL statement (``database_span``). Without a collector
every helper returns at once and no span is made. docs/operations.md ("Traces") lists them all.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.signals import connection_created
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, Tracer, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jobs import options
from jobs.errors import error_class_name
from jobs.reads import reads
from jobs.sql import queries

_propagator = TraceContextTextMapPropagator()
# What a job keeps of a ``tracestate`` (W3C: a vendor should propagate at least 512 characters);
# a longer one is not kept at all rather than cut inside a member.
TRACESTATE_MAX = 512
# A traceparent of version 00 is 55 characters; later versions may append fields.
TRACEPARENT_MAX = 256


def current() -> tuple[str, str]:
    """The current trace context as (traceparent, tracestate); ('', '') outside any trace."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    state = carrier.get("tracestate", "")
    return carrier.get("traceparent", ""), state if len(state) <= TRACESTATE_MAX else ""


# The context a caller sent but was not trusted with (``attached``): the request's span links to it.
_SENT = otel_context.create_key("leitstand.sent_context")
_ids = RandomIdGenerator()


def _trusted() -> bool:
    return True


@contextmanager
def attached(traceparent: str, tracestate: str = "", *, trusted: Callable[[], bool] = _trusted) -> Iterator[None]:
    """Make the context of ``traceparent`` (and ``tracestate``) current inside the block; an empty or
    invalid one changes nothing. When ``trusted()`` (asked only of a valid context) says no, a new
    trace is current instead, linked to the one sent (OpenTelemetry's advice at a trust boundary): the
    request's span, the jobs it creates and its log lines are in a trace of their own, and a caller
    cannot place its work in another's trace."""
    if not traceparent or len(traceparent) > TRACEPARENT_MAX:
        yield
        return
    # A caller's header is bounded before it is parsed: a longer tracestate is dropped whole (W3C
    # allows it), so no parser, and no log line about it, ever holds kilobytes of a caller's text.
    tracestate = tracestate if len(tracestate) <= TRACESTATE_MAX else ""
    context = _propagator.extract({"traceparent": traceparent, "tracestate": tracestate})
    sent = trace.get_current_span(context).get_span_context()
    if sent.is_valid and not trusted():
        context = otel_context.set_value(_SENT, sent, otel_context.Context())
        if _tracer is None:  # no span will start the new trace: its context is made here
            started = SpanContext(_ids.generate_trace_id(), _ids.generate_span_id(), False, sent.trace_flags)
            context = trace.set_span_in_context(NonRecordingSpan(started), context)
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def linked_trace_id() -> str:
    """The trace ID a caller sent and was not trusted with, inside ``attached``; '' otherwise."""
    sent = otel_context.get_value(_SENT)
    return format(sent.trace_id, "032x") if isinstance(sent, SpanContext) else ""


def trace_id(traceparent: str) -> str:
    """The trace ID (32 lower-case hex digits) of a stored ``traceparent``; '' without one."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else ""


# --- spans (recorded only when an SDK is configured) --------------------------------------------

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


class TracingError(ImproperlyConfigured):
    """The ``OTEL_*`` environment asks for an export this build cannot make."""


def enabled() -> bool:
    return _tracer is not None


def configure_from_environment() -> bool:
    """Record spans and export them over OTLP/HTTP when the standard ``OTEL_*`` environment names a
    collector (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); without
    one, or with ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``, tracing stays off and
    no span is made. The SDK and its exporter read the rest themselves: ``OTEL_SERVICE_NAME``
    (default ``leitstand``), ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``(``_ARG``),
    ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``…_TIMEOUT``, ``…_COMPRESSION``. Returns
    whether tracing is on."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if exporter == "none" or not endpoint:
        return False
    if exporter != "otlp":
        raise TracingError(f"OTEL_TRACES_EXPORTER={exporter!r}: only 'otlp' (or 'none') is supported")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if protocol not in ("", "http/protobuf"):
        raise TracingError(f"OTLP protocol {protocol!r}: only 'http/protobuf' is supported (no gRPC exporter)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    configure(BatchSpanProcessor(OTLPSpanExporter()))
    return True


def configure(processor: SpanProcessor) -> TracerProvider:
    """Record spans into ``processor`` from now on (the OTLP export, or a test's in-memory one)."""
    global _tracer, _provider
    resource = Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "leitstand", "host.name": socket.gethostname()}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    if _provider is None and not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(provider)  # what libraries' own instrumentation finds (once per process)
    _provider, _tracer = provider, provider.get_tracer("leitstand")
    # Every connection opened from now on can make its statements spans (database_on).
    connection_created.connect(_wrap_connection, dispatch_uid="leitstand.tracing")
    return provider


def unconfigure() -> None:
    """Stop recording spans (tests)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def flush(timeout_seconds: float = 5.0) -> None:
    """Export the spans still queued: before a process ends without ``atexit`` (a pool's worker)."""
    if _provider is not None:
        _provider.force_flush(int(timeout_seconds * 1000))


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict | None = None,
    quiet: tuple[type[BaseException], ...] = (),
    links: list[Link] | None = None,
) -> Iterator[Span | None]:
    """A span around the block, current inside it; None (and nothing made) when tracing is off. An
    exception leaving the block marks it an error (``error.type``, status ERROR), unless it is one of
    ``quiet`` (not a failure: a job deferred)."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(
        name, kind=kind, attributes=attributes, links=links, record_exception=False, set_status_on_exception=False
    ) as made:
        try:
            yield made
        except BaseException as exc:
            if not isinstance(exc, quiet):
                failed(made, exc)
            raise


def failed(made: Span | None, exc: BaseException | str) -> None:
    """Mark a span an error: ``error.type`` (the exception's class, as attempts name it, or an HTTP
    status or error class given as text) and status ERROR with the exception's message."""
    if made is None:
        return
    if isinstance(exc, str):
        made.set_attribute("error.type", exc)
        made.set_status(Status(StatusCode.ERROR))
    else:
        made.set_attribute("error.type", error_class_name(exc))
        made.set_status(Status(StatusCode.ERROR, str(exc)[:500]))


def attempt_outcome(outcome: str, *, error_class: str = "") -> None:
    """How the current attempt ended, on its span if one is recorded (``leitstand.attempt.outcome``);
    with ``error_class`` the attempt failed and its span is an error."""
    current_span = trace.get_current_span()
    if current_span.is_recording():
        current_span.set_attribute("leitstand.attempt.outcome", outcome)
        if error_class:
            failed(current_span, error_class)


@contextmanager
def attempt(job, *, pool: str, retry_of: str | None = None) -> Iterator[str]:
    """The attempt of a claimed ``job`` (``leases.ClaimedJob``). With tracing off, the context the
    job was created in is current inside the block (the jobs it creates are created in it). With
    tracing on, the attempt is a span of kind CONSUMER (OpenTelemetry's messaging conventions,
    ``process <type>``), current inside the block: a first attempt (and the claim after a deferral
    or a stopping pool handed it back) a child of the context the job was created in; a retry
    (``retry_of`` not None: after a failure, a death, an operator's retry) the root of a new trace
    with links to that context and to ``retry_of``, the span of the attempt it retries ('' when that
    attempt recorded none): a retry hours later is not hidden inside its submitter's trace, and the
    links lead back. Yields the span's ``traceparent`` when it is sampled, else '' (kept on the
    attempt: the console links it, a later retry links to it)."""
    if _tracer is None:
        with attached(job.trace_parent, job.trace_state):
            yield ""
        return
    creation = _extract(job.trace_parent, job.trace_state)
    links = []
    if retry_of is not None:
        for traceparent, role in ((job.trace_parent, "creation"), (retry_of, "previous attempt")):
            linked = trace.get_current_span(_extract(traceparent, "")).get_span_context()
            if linked.is_valid:
                links.append(Link(linked, {"leitstand.link": role}))
        parent = otel_context.Context()  # a new trace
    else:
        parent = creation
    waited = max(0.0, (datetime.now(UTC) - job.due_at).total_seconds()) if job.due_at else 0.0
    attributes = {
        "messaging.system": "leitstand",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": pool,
        "messaging.message.id": str(job.id),
        "leitstand.job.type": job.type,
        "leitstand.job.attempt": job.attempt,
        "leitstand.job.lease_version": job.lease_version,
        "leitstand.job.priority": job.priority,
        "leitstand.job.correlation_id": job.correlation_id,
        # The claim's wait: from when the job was due to when this attempt started.
        "leitstand.job.wait_ms": round(waited * 1000, 3),
    }
    with _tracer.start_as_current_span(
        f"process {job.type}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as made:
        yield traceparent_of(made)


def traceparent_of(made: Span | None) -> str:
    """A recorded span's ``traceparent``; '' when there is none or the sampler dropped it (a link to it
    would lead nowhere)."""
    if made is None or not made.get_span_context().trace_flags.sampled:
        return ""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(made))
    return carrier.get("traceparent", "")


def headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current context, for a request to a receiver that
    should join the trace (the PHP core's webhooks); {} outside any trace."""
    traceparent, tracestate = current()
    if not traceparent:
        return {}
    return {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}


def _extract(traceparent: str, tracestate: str):
    if not traceparent:
        return otel_context.Context()
    return _propagator.extract({"traceparent": traceparent, "tracestate": tracestate}, context=otel_context.Context())


@contextmanager
def client_span(method: str, host: str, port: int | None, url: str = "") -> Iterator[Span | None]:
    """An outgoing HTTP request (OpenTelemetry's HTTP client conventions): ``url`` only where it may be
    seen (a crawled page's; a receiver's may carry credentials in its path)."""
    attributes = {"http.request.method": method, "server.address": host}
    if port:
        attributes["server.port"] = port
    if url:
        attributes["url.full"] = url
    with span(method, kind=SpanKind.CLIENT, attributes=attributes) as made:
        yield made


def answered(made: Span | None, status: int) -> None:
    """The answer's status on a client span; 4xx and 5xx make it an error, as the conventions ask."""
    if made is None:
        return
    made.set_attribute("http.response.status_code", status)
    if status >= 400:
        failed(made, str(status))


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _method(method: str) -> str:
    return method if method in _METHODS else "_OTHER"  # a span name a caller cannot multiply


@contextmanager
def server_span(request) -> Iterator[Span | None]:
    """A Django ``request`` this process serves (OpenTelemetry's HTTP server conventions), a child
    of the context current (the caller's, once ``attached``; the root of a new trace linked to the
    caller's when it was not trusted); call ``served`` with its answer."""
    attributes = {"http.request.method": _method(request.method), "url.path": request.path[:500]}
    sent = otel_context.get_value(_SENT)
    links = [Link(sent, {"leitstand.link": "sent by the caller"})] if isinstance(sent, SpanContext) else None
    with span(_method(request.method), kind=SpanKind.SERVER, attributes=attributes, links=links) as made:
        yield made


def served(made: Span | None, request, status: int) -> None:
    """A served request's route (its span named ``<method> <route>``) and status; a 5xx makes it an
    error (a 4xx is the caller's)."""
    if made is None:
        return
    made.set_attribute("http.response.status_code", status)
    match = getattr(request, "resolver_match", None)
    if match is not None:
        made.set_attribute("http.route", f"/{match.route}")
        made.update_name(f"{_method(request.method)} /{match.route}")
    if status >= 500:
        failed(made, str(status))


# --- database spans (opt-in: LEITSTAND_TRACE_DATABASE) -------------------------------------------

QUERY_TEXT_CHARS = 4000


def database_on() -> bool:
    """Whether SQL statements are spans: traces recorded and ``LEITSTAND_TRACE_DATABASE`` on."""
    return _tracer is not None and options.current().trace_database


@contextmanager
def database_span(sql: str) -> Iterator[None]:
    """A CLIENT span around one statement inside a request's or an attempt's span (OpenTelemetry's
    database conventions): named by the engine's name for it (jobs/queries.sql, jobs/reads.sql) or
    else its first keyword; its text is the statement with placeholders, never a parameter's value."""
    if not database_on() or not trace.get_current_span().is_recording():
        yield  # a statement outside a request's or attempt's span (a claim, a sweep) starts no trace
        return
    name = queries.name_of(sql) or reads.name_of(sql)
    operation = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "SQL"
    attributes = {
        "db.system.name": "postgresql",
        "db.operation.name": name or operation,
        "db.query.text": sql[:QUERY_TEXT_CHARS],
    }
    with span(name or operation, kind=SpanKind.CLIENT, attributes=attributes):
        yield


def database_wrapper(execute, sql, params, many, context):
    """Django's execute wrapper (``connection.execute_wrappers``): each ORM or cursor statement of a
    connection a span when ``database_on``."""
    with database_span(sql if isinstance(sql, str) else str(sql)):
        return execute(sql, params, many, context)


def _wrap_connection(sender, connection, **kwargs) -> None:
    if database_wrapper not in connection.execute_wrappers:
        # First, so a ``connection.execute_wrapper(...)`` block entered before cannot pop it on leaving.
        connection.execute_wrappers.insert(0, database_wrapper)
