"""Spans, when traces are recorded (jobs/tracing.py): each attempt a CONSUMER span in the trace its job
was created in, each step a child with its outcome, a retry a new trace linked to the creation and to
the attempt before; and what an attempt keeps of its handler's log lines (jobs/logs.py)."""

import logging
import os
import time

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from jobs import leases, logs, tracing
from jobs.errors import Deferred, TransientError
from jobs.models import Attempt, Job
from jobs.retry import RetryPolicy
from workers.runtime.context import Done

pytestmark = pytest.mark.django_db(transaction=True)
CREATION = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
log = logging.getLogger("tests.handler")


def hex_ids(span) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def named(exporter, name):
    found = [span for span in exporter.get_finished_spans() if span.name == name]
    assert found, f"no span {name!r} among {[s.name for s in exporter.get_finished_spans()]}"
    return found


def test_an_attempt_is_a_consumer_span_of_its_creation_with_its_steps_inside(make_job, job_type, pool_runtime, spans):
    def handler(context):
        with context.step("fetch", url="https://example.org/") as info:
            info["status"] = 200
        with context.step("spawn"):
            context.spawn("synthetic", {}, key="child-1")
        with pytest.raises(ValueError), context.step("extract"):
            raise ValueError("no image")
        return Done("ok")

    job_type("traced", handler, expected_paths=("fetch spawn extract",))
    with tracing.attached(CREATION, "php=core"):
        job = make_job("traced", pool="crawl", payload={})
    pool_runtime("crawl").wake()

    (attempt,) = named(spans, "process traced")
    trace_id, span_id = hex_ids(attempt)
    assert attempt.kind is SpanKind.CONSUMER
    assert trace_id == CREATION.split("-")[1] and format(attempt.parent.span_id, "016x") == CREATION.split("-")[2]
    assert attempt.attributes["messaging.message.id"] == str(job.pk)
    assert attempt.attributes["messaging.destination.name"] == "crawl"
    assert attempt.attributes["leitstand.job.attempt"] == 1
    assert attempt.attributes["leitstand.job.wait_ms"] >= 0
    assert attempt.attributes["leitstand.attempt.outcome"] == "done"
    steps = {span.name: span for span in spans.get_finished_spans() if span.name.startswith("step ")}
    assert set(steps) == {"step fetch", "step spawn", "step extract"}
    assert all(format(step.parent.span_id, "016x") == span_id for step in steps.values())
    assert steps["step fetch"].attributes["leitstand.step.outcome"] == "ok"
    assert steps["step extract"].attributes["leitstand.step.outcome"] == "failed"
    assert steps["step extract"].status.status_code is StatusCode.ERROR
    # The attempt keeps its span; the child was created inside it, so its own attempt will be a descendant.
    assert Attempt.objects.get(job=job).trace_span == f"00-{trace_id}-{span_id}-01"
    child = Job.objects.get(parent=job)
    assert child.trace_parent == f"00-{trace_id}-{hex_ids(steps['step spawn'])[1]}-01"
    assert child.trace_state == "php=core"


def test_a_deferred_step_is_no_error_and_a_failed_attempt_is(make_job, job_type, pool_runtime, spans):
    def deferring(context):
        with context.step("slot"):
            raise Deferred("host busy", retry_after=60)

    def failing(context):
        raise TransientError("upstream answered 503")

    job_type("deferring", deferring, expected_paths=("slot",))
    job_type("failing", failing, expected_paths=("",))
    make_job("deferring", pool="crawl", payload={})
    make_job("failing", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    (slot,) = named(spans, "step slot")
    assert slot.attributes["leitstand.step.outcome"] == "deferred" and slot.status.status_code is StatusCode.UNSET
    assert named(spans, "process deferring")[0].attributes["leitstand.attempt.outcome"] == "released"
    (failed,) = named(spans, "process failing")
    assert (
        failed.status.status_code is StatusCode.ERROR
        and failed.attributes["error.type"] == "jobs.errors.TransientError"
    )


def test_a_retry_is_a_new_trace_linked_to_its_creation_and_the_attempt_before(make_job, job_type, pool_runtime, spans):
    calls = []

    def flaky(context):
        calls.append(context.attempt)
        if len(calls) == 1:
            raise TransientError("first try fails")
        return Done("ok")

    job_type("flaky", flaky, expected_paths=("",), retry=RetryPolicy(base_seconds=0.01, cap_seconds=0.01))
    with tracing.attached(CREATION):
        job = make_job("flaky", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    time.sleep(0.05)
    leases.retries_promote_due()
    pool_runtime("crawl").wake()
    assert calls == [1, 2]

    first, second = sorted(named(spans, "process flaky"), key=lambda s: s.attributes["leitstand.job.attempt"])
    assert hex_ids(first)[0] == CREATION.split("-")[1]
    assert second.parent is None and hex_ids(second)[0] != hex_ids(first)[0], "a retry is a new trace"
    links = {link.attributes["leitstand.link"]: link.context for link in second.links}
    assert format(links["creation"].span_id, "016x") == CREATION.split("-")[2]
    assert links["previous attempt"].span_id == first.context.span_id
    assert links["previous attempt"].trace_id == first.context.trace_id
    attempts = Attempt.objects.filter(job=job).order_by("lease_version")
    assert [a.trace_span.split("-")[1] for a in attempts] == [hex_ids(first)[0], hex_ids(second)[0]]


def test_with_tracing_off_no_span_is_made_and_the_attempt_keeps_none(make_job, job_type, pool_runtime):
    assert not tracing.enabled()
    job_type("plain", lambda context: Done("ok"), expected_paths=("",))
    with tracing.attached(CREATION):
        job = make_job("plain", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    assert Attempt.objects.get(job=job).trace_span == ""


def test_an_attempt_keeps_its_handlers_warnings_and_errors_not_the_runtimes_own_line(make_job, job_type, pool_runtime):
    def noisy(context):
        log.info("an info line is not kept by default")
        log.warning("disk at %d%%", 91)
        try:
            {}["missing"]
        except KeyError:
            log.exception("parse failed")
        raise TransientError("gave up")

    job_type("noisy", noisy, expected_paths=("",), retry=RetryPolicy(max_attempts=1))
    job = make_job("noisy", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    kept = Attempt.objects.get(job=job).log_lines
    assert [(line["level"], line["message"]) for line in kept["lines"]] == [
        ("WARNING", "disk at 91%"),
        ("ERROR", "parse failed"),
    ]
    assert kept["dropped"] == 0 and kept["lines"][0]["logger"] == "tests.handler"
    assert "KeyError: 'missing'" in kept["lines"][1]["exception"]


def test_the_lines_kept_are_bounded_per_attempt_and_hostile_text_is_stored_safely(make_job, job_type, pool_runtime):
    def flooding(context):
        log.info("first info")
        log.info("second info")
        log.info("third info: over the type's allowance")
        log.warning("NUL \x00 and a lone surrogate \ud800 and %s", "x" * 10_000)
        for n in range(100):
            log.error("line %d", n)
        return Done("ok")

    job_type("flooding", flooding, expected_paths=("",), log_info_lines=2)
    job = make_job("flooding", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    kept = Attempt.objects.get(job=job).log_lines
    lines = kept["lines"]
    assert len(lines) == logs.LINES_KEPT and kept["dropped"] == 2 + 1 + 100 - logs.LINES_KEPT
    assert [line["message"] for line in lines[:2]] == ["first info", "second info"]
    assert lines[2]["message"].startswith("NUL \ufffd and a lone surrogate \ufffd")
    assert len(lines[2]["message"]) == logs.MESSAGE_CHARS
    assert lines[3]["message"] == "line 0"
    assert Job.objects.get(pk=job.pk).state == "done"


def test_a_line_whose_arguments_do_not_fit_its_format_is_kept_not_lost():
    kept = logs.Kept(info_lines=0)
    record = logging.LogRecord("h", logging.WARNING, __file__, 1, "bad format %d", ("not a number",), None)
    kept.add(record)
    assert kept.stored()["lines"][0]["message"] == "'bad format %d' (unformattable: TypeError)"


def test_with_database_spans_an_attempt_s_statements_are_spans_named_by_the_engine(
    make_job, job_type, pool_runtime, spans, settings
):
    from django.db import connection

    from workers.runtime.models import Pool

    def handler(context):
        with context.step("look"):
            Pool.objects.filter(name="crawl").exists()
        with context.step("spawn"):
            context.spawn("synthetic", {}, key="child-db")
        return Done("ok")

    job_type("queries", handler, expected_paths=("look spawn",))
    make_job("queries", pool="crawl", payload={})
    settings.LEITSTAND_TRACE_DATABASE = True
    with connection.execute_wrapper(tracing.database_wrapper):  # as on every connection opened later
        pool_runtime("crawl").wake()
    statements = [span for span in spans.get_finished_spans() if "db.system.name" in span.attributes]
    by_id = {span.context.span_id: span for span in spans.get_finished_spans()}
    parents = {(span.name, by_id[span.parent.span_id].name) for span in statements}
    assert ("SELECT", "step look") in parents, parents
    assert any(parent == "step spawn" and name.startswith("job") for name, parent in parents), parents
    assert all(
        "%(" in span.attributes["db.query.text"] or "%s" in span.attributes["db.query.text"]
        for span in statements
        if span.name != "SELECT"
    )
    assert all(span.parent is not None for span in statements), "the claim and completion start no trace"
    settings.LEITSTAND_TRACE_DATABASE = False
    spans.clear()
    make_job("queries", pool="crawl", payload={}, idempotency_key="again")
    with connection.execute_wrapper(tracing.database_wrapper):
        pool_runtime("crawl").wake()
    assert not [span for span in spans.get_finished_spans() if "db.system.name" in span.attributes]


def test_the_claim_after_a_deferral_stays_in_its_submission_s_trace_and_an_operator_s_retry_does_not(
    make_job, job_type, pool_runtime, spans, db_clock
):
    from jobs import services

    calls = []

    def deferring_once_then_failing(context):
        calls.append(1)
        if len(calls) == 1:
            raise Deferred("host busy", retry_after=0.01)
        raise TransientError("gone for good")

    job_type(
        "politely",
        deferring_once_then_failing,
        expected_paths=("",),
        retry=RetryPolicy(base_seconds=0.01, cap_seconds=0.01, max_attempts=1),
    )
    with tracing.attached(CREATION):
        job = make_job("politely", pool="crawl", payload={}, max_attempts=1)
    pool_runtime("crawl").wake()
    time.sleep(0.05)
    pool_runtime("crawl").wake()
    assert Job.objects.get(pk=job.pk).state == "dead"
    services.job_retry_now(job_id=job.pk, actor="operator", reason="the host is back")
    pool_runtime("crawl").wake()
    deferred, failed, retried = sorted(named(spans, "process politely"), key=lambda s: s.start_time)
    creation_trace, creation_span = CREATION.split("-")[1:3]
    for first in (deferred, failed):
        assert hex_ids(first)[0] == creation_trace and format(first.parent.span_id, "016x") == creation_span
        assert not first.links, "a deferral's next claim is the same submission's work"
    assert retried.parent is None and hex_ids(retried)[0] != creation_trace
    assert {link.attributes["leitstand.link"] for link in retried.links} == {"creation", "previous attempt"}


def test_a_sampled_out_attempt_keeps_no_span(make_job, job_type, pool_runtime, spans, monkeypatch):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tracing.configure(SimpleSpanProcessor(spans))  # the sampler is read when the provider is made
    job_type("unsampled", lambda context: Done("ok"), expected_paths=("",))
    job = make_job("unsampled", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    assert spans.get_finished_spans() == ()
    assert Attempt.objects.get(job=job).trace_span == "", "no console link to a trace never stored"


def test_a_line_that_cannot_be_made_is_counted_not_raised():
    class Unprintable:
        def __str__(self):
            raise RuntimeError("no text for you")

    record = logging.LogRecord("h", logging.WARNING, __file__, 1, Unprintable(), None, None)
    with logs.kept() as kept:
        logs.KeepHandler().emit(record)  # pytest's own handler would raise here; ours must not
    assert kept.stored() == {"lines": [], "dropped": 1}


def test_an_attempt_keeps_at_most_its_text_budget(make_job, job_type, pool_runtime):
    def hostile(context):
        for _ in range(20):
            log.warning("y" * logs.MESSAGE_CHARS)
        return Done("ok")

    job_type("hostile_lines", hostile, expected_paths=("",))
    job = make_job("hostile_lines", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    assert Job.objects.get(pk=job.pk).state == "done"
    kept = Attempt.objects.get(job=job).log_lines
    assert len(kept["lines"]) == logs.TEXT_KEPT // logs.MESSAGE_CHARS
    assert kept["dropped"] == 20 - logs.TEXT_KEPT // logs.MESSAGE_CHARS


@pytest.mark.parametrize(
    ("environment", "outcome"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, "'otlp'"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "gRPC"),
    ],
)
def test_the_otel_environment_turns_tracing_on_off_or_is_refused_by_name(environment, outcome, monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    try:
        if isinstance(outcome, str):
            with pytest.raises(ImproperlyConfigured, match=outcome):
                tracing.configure_from_environment()
        else:
            assert tracing.configure_from_environment() is outcome
            assert tracing.enabled() is outcome
    finally:
        tracing.unconfigure()
