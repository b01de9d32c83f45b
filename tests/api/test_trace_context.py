"""W3C trace context in and through (jobs/tracing.py): a submission's ``traceparent`` and
``tracestate`` are kept on its job and named in the answer, batch members and children carry the
trace they were created in, and a hostile or broken header is ignored — never an error."""

import json
import logging
import uuid

import pytest

from api.tokens import token_create
from jobs import tracing
from jobs.clients import client_trace_trust_set
from jobs.models import Job
from workers.runtime.context import Done

pytestmark = pytest.mark.django_db

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
def headers():
    """The PHP core's token: its client trusted by an operator, so its requests join the traces they name."""
    token, clear = token_create(name="php-core", scopes=["jobs:read", "jobs:write", "jobs:synthetic"])
    client_trace_trust_set(client_id=token.client_id, trusted=True)
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def partner(name="partner", *scopes):
    _, clear = token_create(name=name, scopes=["jobs:read", "jobs:write", "jobs:synthetic", *scopes], client=name)
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def submit(client, headers, key="k-1", **extra):
    return client.post(
        "/api/v1/jobs",
        json.dumps({"type": "synthetic", "payload": {}, "idempotency_key": key}),
        content_type="application/json",
        **headers,
        **extra,
    )


def test_a_submission_s_trace_is_kept_on_its_job_and_named_in_the_answer(client, headers):
    response = submit(client, headers, HTTP_TRACEPARENT=TRACEPARENT, HTTP_TRACESTATE="vendor=a1,other=b2")
    assert response.status_code == 201
    assert response["traceresponse"] == TRACEPARENT
    assert response.json()["trace_id"] == TRACE
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.trace_parent, job.trace_state) == (TRACEPARENT, "vendor=a1,other=b2")
    read = client.get(f"/api/v1/jobs/{job.pk}", **headers)
    assert read.json()["trace_id"] == TRACE
    listed = client.get("/api/v1/jobs", **headers).json()["items"]
    assert [item["trace_id"] for item in listed] == [TRACE]


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "garbage",
        f"ff-{TRACE}-00f067aa0ba902b7-01",  # version ff is invalid
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # an all-zero trace ID
        f"00-{TRACE}-0000000000000000-01",  # an all-zero parent ID
        f"00-{TRACE.upper()}-00f067aa0ba902b7-01",  # upper case is not allowed
        f"00-{TRACE}-00f067aa0ba902b7-01" + "x" * 8000,
        f"00-{TRACE}\r\n-00f067aa0ba902b7-01",
    ],
)
def test_a_broken_or_hostile_traceparent_is_ignored_and_the_job_is_created(client, headers, traceparent):
    response = submit(client, headers, HTTP_TRACEPARENT=traceparent, HTTP_TRACESTATE="vendor=a1")
    assert response.status_code == 201, response.content
    assert "traceresponse" not in response and response.json()["trace_id"] == ""
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.trace_parent, job.trace_state) == ("", "")


def test_a_tracestate_too_long_to_keep_is_dropped_and_the_trace_kept(client, headers):
    long_state = ",".join(f"v{n}={'x' * 20}" for n in range(30))  # 30 members, 713 characters
    response = submit(client, headers, HTTP_TRACEPARENT=TRACEPARENT, HTTP_TRACESTATE=long_state)
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.trace_parent, job.trace_state) == (TRACEPARENT, "")


def test_a_batch_s_members_carry_the_submission_s_trace(client, headers):
    response = client.post(
        "/api/v1/batches",
        json.dumps(
            {
                "key": "b-1",
                "name": "traced import",
                "jobs": [{"type": "synthetic", "payload": {}, "idempotency_key": f"m-{n}"} for n in range(3)],
            }
        ),
        content_type="application/json",
        HTTP_TRACEPARENT=TRACEPARENT,
        **headers,
    )
    assert response.status_code in (200, 201), response.content
    assert set(Job.objects.filter(batch__isnull=False).values_list("trace_parent", flat=True)) == {TRACEPARENT}


def test_a_child_carries_its_parent_s_trace_and_the_run_s_log_lines_name_it(
    make_job, pool_runtime, job_type, log_records
):
    def spawning(context):
        logging.getLogger("leitstand.test.handler").warning("spawning")
        context.spawn("synthetic", payload={"pool": "analysis"}, key=f"child-{context.job_id}")
        return Done(reason="spawned")

    job_type("trace_test", spawning, pool="analysis")  # one job at a time: this test's rows are uncommitted
    with tracing.attached(TRACEPARENT, "vendor=a1"):
        parent = make_job("trace_test", pool="analysis", payload={})
    untraced = make_job("trace_test", pool="analysis", payload={}, idempotency_key=str(uuid.uuid4()))
    pool_runtime("analysis").wake()
    child = Job.objects.get(parent=parent)
    assert (child.trace_parent, child.trace_state) == (TRACEPARENT, "vendor=a1")
    assert Job.objects.get(parent=untraced).trace_parent == "", "outside any trace, none is invented"
    spawning_lines = [record for record in log_records if record.getMessage() == "spawning"]
    assert sorted(getattr(record, "trace_id", "") for record in spawning_lines) == ["", TRACE]


def test_the_job_page_shows_its_trace_linked_to_the_tracing_system(client, headers, settings, django_user_model):
    traced = Job.objects.get(pk=submit(client, headers, HTTP_TRACEPARENT=TRACEPARENT).json()["id"])
    untraced = Job.objects.get(pk=submit(client, headers, key="k-2").json()["id"])
    client.force_login(django_user_model.objects.create_superuser("operator"))
    page = client.get(f"/admin/jobs/job/{traced.pk}/change/").content.decode()
    assert TRACE in page and "jaeger" not in page, "without LEITSTAND_TRACE_URL, the trace ID alone"
    settings.LEITSTAND_TRACE_URL = "https://jaeger.example/trace/{trace_id}"
    page = client.get(f"/admin/jobs/job/{traced.pk}/change/").content.decode()
    assert f'<a href="https://jaeger.example/trace/{TRACE}" rel="noreferrer">{TRACE}</a>' in page
    assert "none (created outside any trace)" in client.get(f"/admin/jobs/job/{untraced.pk}/change/").content.decode()


@pytest.mark.parametrize(
    "template", ["jaeger.example/{trace_id}", "https://jaeger.example/trace", "javascript:{trace_id}"]
)
def test_a_trace_url_that_is_no_http_template_is_refused_by_name(settings, template):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_TRACE_URL is an http"):
        settings.LEITSTAND_TRACE_URL = template


def test_with_spans_a_request_is_a_server_span_of_its_caller_and_its_job_a_child_of_it(client, headers, spans):
    from opentelemetry.trace import SpanKind

    response = submit(client, headers, HTTP_TRACEPARENT=TRACEPARENT)
    assert response.status_code == 201
    (server,) = [span for span in spans.get_finished_spans() if span.kind is SpanKind.SERVER]
    own = f"00-{TRACE}-{format(server.context.span_id, '016x')}-01"
    assert server.name == "POST /api/v1/jobs" and server.attributes["http.route"] == "/api/v1/jobs"
    assert format(server.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert server.attributes["http.response.status_code"] == 201
    assert response["traceresponse"] == own, "the answer names the request's own span"
    assert Job.objects.get(pk=response.json()["id"]).trace_parent == own
    refused = client.get("/api/v1/jobs/not-a-uuid", **headers)
    assert refused.status_code in (404, 422)
    last = [span for span in spans.get_finished_spans() if span.kind is SpanKind.SERVER][-1]
    assert last.status.status_code.name == "UNSET", "a caller's mistake is not the server's error"
    assert last.parent is None, "a request without a traceparent starts a trace"


@pytest.mark.parametrize("tracestate", ["x" * 7000, "bad member " * 40])
def test_a_callers_malformed_tracestate_writes_no_warning_and_no_long_line(client, caplog, tracestate):
    """Issue 54, item 4: without a token, a malformed 7 KB tracestate wrote a 7 KB WARNING line."""
    caplog.set_level(logging.INFO)
    response = client.get("/api/v1/jobs", HTTP_TRACEPARENT=TRACEPARENT, HTTP_TRACESTATE=tracestate)
    assert response.status_code == 401
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("opentelemetry")]
    assert all(len(r.getMessage()) < 1024 for r in caplog.records), [len(r.getMessage()) for r in caplog.records]
    # The valid traceparent of a caller nobody trusts: a new trace, named in the answer.
    assert response.headers["traceresponse"].split("-")[1] not in (TRACE, "0" * 32)


def test_a_client_nobody_trusts_starts_a_new_trace_linked_to_the_one_it_sent(client, caplog):
    """Attack (issue 54, item 14): client B sent client A's trace ID and got a job in A's trace."""
    caplog.set_level(logging.INFO)
    response = submit(client, partner(), HTTP_TRACEPARENT=TRACEPARENT, HTTP_TRACESTATE="vendor=a1")
    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["id"])
    own = job.trace_parent.split("-")
    assert own[1] not in (TRACE, "0" * 32) and own[3] == "01" and job.trace_state == ""
    assert response["traceresponse"] == job.trace_parent and response.json()["trace_id"] == own[1]
    lines = [r for r in caplog.records if getattr(r, "linked_trace_id", "")]
    assert lines and {(r.linked_trace_id, r.trace_id) for r in lines} == {(TRACE, own[1])}
    second = submit(client, partner("partner-2"), key="k-2", HTTP_TRACEPARENT=TRACEPARENT)
    assert second.json()["trace_id"] not in (TRACE, own[1]), "each request a trace of its own"


@pytest.mark.parametrize("trust", ["jobs:all", "operator"])
def test_a_token_with_jobs_all_or_a_trusted_client_joins_the_trace(client, trust):
    headers = partner("trusted", "jobs:all") if trust == "jobs:all" else partner("trusted")
    if trust == "operator":
        from jobs.models import Client

        client_trace_trust_set(client_id=Client.objects.get(name="trusted").pk, trusted=True)
    response = submit(client, headers, HTTP_TRACEPARENT=TRACEPARENT)
    assert response.json()["trace_id"] == TRACE


def test_with_spans_an_untrusted_request_is_the_root_of_a_trace_linked_to_the_one_sent(client, spans):
    from opentelemetry.trace import SpanKind

    response = submit(client, partner(), HTTP_TRACEPARENT=TRACEPARENT)
    (server,) = [span for span in spans.get_finished_spans() if span.kind is SpanKind.SERVER]
    assert server.parent is None and format(server.context.trace_id, "032x") != TRACE
    (link,) = server.links
    assert (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) == (TRACE, "00f067aa0ba902b7")
    assert Job.objects.get(pk=response.json()["id"]).trace_parent.split("-")[1] == format(
        server.context.trace_id, "032x"
    )
