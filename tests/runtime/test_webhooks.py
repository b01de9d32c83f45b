"""Webhooks to the PHP core: events are written in the transaction of their change, turned into
delivery jobs once each, and delivered signed by the notify pool to a local receiver."""

import base64
import json

import pytest
from django.db import transaction
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from config.checks import timing_invariants
from jobs import leases
from jobs.models import Job, State, WebhookEvent
from jobs.services import job_confirm
from tests.support.receiver import Receiver, signature_valid
from workers.runtime.webhook import SIGNATURE_HEADER
from workers.runtime.webhook_sweep import deliveries_make

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "php-core-secret-7"


@pytest.fixture
def hook(settings):
    made = []

    def start(status=200, **overrides):
        made.append(Receiver(status))
        settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "url": made[-1].url, "secret": SECRET, **overrides}
        return made[-1]

    yield start
    for receiver in made:
        receiver.close()


@pytest.fixture
def outcomes(make_job, pool_runtime):
    """Three synthetic jobs run by a real pool runtime: one done, one dead, one ready for review."""
    done = make_job("synthetic", pool="crawl", payload={}, correlation_id="order-17")
    dead = make_job("synthetic", pool="crawl", payload={"fail": "permanent"})
    unclear = make_job("synthetic", pool="crawl", payload={"fail": "unclear"})
    pool_runtime("crawl").wake()
    job_confirm(job_id=done.pk, actor="test")
    leases.unclear_queue_for_review()
    states = {job.pk: Job.objects.get(pk=job.pk).state for job in (done, dead, unclear)}
    assert states == {done.pk: State.DONE, dead.pk: State.DEAD, unclear.pk: State.READY_FOR_REVIEW}
    return done, dead, unclear


def outbox():
    return [(event.kind, event.job_id) for event in WebhookEvent.objects.order_by("id")]


def test_done_dead_and_ready_for_review_write_one_event_each(outcomes):
    done, dead, unclear = outcomes
    assert sorted(outbox()) == sorted(
        [("job.done", done.pk), ("job.dead", dead.pk), ("job.ready_for_review", unclear.pk)]
    )
    assert all(event.transition_id for event in WebhookEvent.objects.all())


def test_a_rolled_back_change_leaves_no_event(make_job, pool_runtime):
    job = make_job("synthetic", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    with pytest.raises(RuntimeError), transaction.atomic():
        job_confirm(job_id=job.pk, actor="test")
        raise RuntimeError("the business change failed")
    assert Job.objects.get(pk=job.pk).state == State.RESULT_STORED and outbox() == []


def test_without_a_webhook_the_sweep_drops_the_events(outcomes):
    assert deliveries_make() == 0
    assert outbox() == [] and not Job.objects.filter(type="api_webhook").exists()


def test_each_event_becomes_one_delivery_job_and_is_delivered_signed(outcomes, hook, pool_runtime):
    receiver = hook(200)
    done, dead, unclear = outcomes
    assert deliveries_make() == 3 and outbox() == []
    assert deliveries_make() == 0, "the outbox is empty: a second sweep delivers nothing again"
    deliveries = Job.objects.filter(type="api_webhook")
    assert {job.pool for job in deliveries} == {"notify"}
    assert {job.payload["event"]["job"]["id"] for job in deliveries} == {str(done.pk), str(dead.pk), str(unclear.pk)}

    pool_runtime("notify").wake()
    assert {job.state for job in Job.objects.filter(type="api_webhook")} == {State.DONE}
    assert len(receiver.deliveries) == 3
    bodies = {}
    standard = Webhook("whsec_" + base64.b64encode(SECRET.encode()).decode())
    for headers, body in receiver.deliveries:
        assert signature_valid(SECRET, headers[SIGNATURE_HEADER], body)
        # Standard Webhooks too: its own library verifies the delivery, and its ID is the event's.
        assert standard.verify(body, dict(headers)) == json.loads(body)
        message = json.loads(body)
        assert headers["webhook-id"] == message["id"]
        assert headers["X-Leitstand-Event-Id"] == message["id"] and message["id"].startswith("evt_")
        assert headers["X-Leitstand-Event-Type"] == message["type"]
        assert headers["X-Correlation-ID"] == message["job"]["correlation_id"]
        bodies[message["type"]] = message
    assert set(bodies) == {"job.done", "job.dead", "job.ready_for_review"}
    assert bodies["job.done"]["job"] == {
        "id": str(done.pk),
        "type": "synthetic",
        "idempotency_key": done.idempotency_key,
        "correlation_id": "order-17",
        "source": "",
        "state": "done",
        "cause": "business outcome confirmed",
    }
    assert bodies["job.dead"]["job"]["state"] == "dead"
    assert {message["client"] for message in bodies.values()} == {None}, "the system's own jobs name no client"

    deliveries_make()
    assert not Job.objects.filter(type="api_webhook").exclude(pk__in=deliveries).exists(), (
        "a delivered webhook does not announce itself with another webhook"
    )


@pytest.mark.parametrize("form", ["leitstand", "standard"])
def test_deliveries_carry_the_signatures_the_setting_names_and_tampering_is_refused(outcomes, hook, pool_runtime, form):
    receiver = hook(200, signatures=form)
    deliveries_make()
    pool_runtime("notify").wake()
    assert len(receiver.deliveries) == 3
    standard = Webhook("whsec_" + base64.b64encode(SECRET.encode()).decode())
    for headers, body in receiver.deliveries:
        headers = {name.lower(): value for name, value in dict(headers).items()}
        assert (SIGNATURE_HEADER.lower() in headers) == (form == "leitstand")
        assert ("webhook-signature" in headers) == (form == "standard")
        if form == "standard":
            standard.verify(body, headers)
            tampered = body.replace(b'"job"', b'"jab"')
            with pytest.raises(WebhookVerificationError):
                standard.verify(tampered, headers)
            with pytest.raises(WebhookVerificationError):
                Webhook(b"another secret").verify(body, headers)
            with pytest.raises(WebhookVerificationError):  # a replay a day later
                standard.verify(body, {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 86400)})
        else:
            assert signature_valid(SECRET, headers[SIGNATURE_HEADER.lower()], body)
            assert not signature_valid(SECRET, headers[SIGNATURE_HEADER.lower()], body + b" ")


def test_an_unknown_signature_form_is_a_configuration_error(settings):
    settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "signatures": "hmac-md5"}
    assert any("LEITSTAND_WEBHOOK_SIGNATURES" in error.msg for error in timing_invariants())


def test_events_and_job_types_can_be_narrowed(outcomes, hook):
    hook(200, events=["job.dead", "job.ready_for_review"], job_types=["synthetic"])
    assert deliveries_make() == 2
    hook(200, events=["job.dead"], job_types=["crawl"])
    outcomes_again = [WebhookEvent.objects.create(kind="job.dead", job_id=job.pk) for job in outcomes]
    assert len(outcomes_again) == 3 and deliveries_make() == 0 and outbox() == []


def test_a_refusing_receiver_is_retried(outcomes, hook, pool_runtime):
    receiver = hook(503)
    deliveries_make()
    pool_runtime("notify").wake()
    jobs = Job.objects.filter(type="api_webhook")
    assert {job.state for job in jobs} == {State.FAILED} and len(receiver.deliveries) == 3
    assert {job.error_class for job in jobs} == {"workers.runtime.webhook.WebhookRefused"}


def test_a_webhook_url_without_a_secret_is_a_configuration_error(settings):
    settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "url": "https://core.example/hook", "secret": ""}
    assert "leitstand.E009" in {error.id for error in timing_invariants()}
    settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "secret": "s", "events": ["job.finished"]}
    assert any("job.finished" in error.msg for error in timing_invariants())


def test_a_non_ascii_correlation_id_of_an_older_job_does_not_silence_its_webhooks(make_job, hook, pool_runtime):
    """The API refuses such IDs now (issue 35); a job stored before keeps its webhooks: the header
    carries the ID percent-encoded, the body as it is."""
    receiver = hook(200)
    job = make_job("synthetic", pool="crawl", payload={})
    Job.objects.filter(pk=job.pk).update(correlation_id="bestellung-müller-4711")
    pool_runtime("crawl").wake()
    job_confirm(job_id=job.pk, actor="test")
    assert deliveries_make() == 1
    pool_runtime("notify").wake()
    assert Job.objects.get(type="api_webhook").state == State.DONE
    ((headers, body),) = receiver.deliveries
    assert headers["X-Correlation-ID"] == "bestellung-m%C3%BCller-4711"
    assert json.loads(body)["job"]["correlation_id"] == "bestellung-müller-4711"


def test_a_webhook_carries_the_trace_its_job_was_created_in(make_job, hook, pool_runtime):
    from jobs import tracing

    receiver = hook(200)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with tracing.attached(traceparent, "php=core"):
        traced = make_job("synthetic", pool="crawl", payload={})
    untraced = make_job("synthetic", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    for job in (traced, untraced):
        job_confirm(job_id=job.pk, actor="test")
    assert deliveries_make() == 2
    pool_runtime("notify").wake()
    by_job = {json.loads(body)["job"]["id"]: headers for headers, body in receiver.deliveries}
    assert (by_job[str(traced.pk)]["traceparent"], by_job[str(traced.pk)]["tracestate"]) == (traceparent, "php=core")
    assert "traceparent" not in by_job[str(untraced.pk)], "no trace is invented for a job outside one"


def test_with_spans_a_webhook_carries_its_client_span_in_its_jobs_trace(make_job, hook, pool_runtime, spans):
    from opentelemetry.trace import SpanKind

    from jobs import tracing

    receiver = hook(200)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with tracing.attached(traceparent):
        job = make_job("synthetic", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    job_confirm(job_id=job.pk, actor="test")
    assert deliveries_make() == 1
    pool_runtime("notify").wake()
    ((headers, _),) = receiver.deliveries
    (post,) = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    trace_id, span_id = format(post.context.trace_id, "032x"), format(post.context.span_id, "016x")
    assert headers["traceparent"] == f"00-{trace_id}-{span_id}-01", "the receiver's parent is the POST itself"
    assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert post.name == "POST" and post.attributes["http.response.status_code"] == 200
    assert "url.full" not in post.attributes, "a receiver's URL may carry a credential"
    by_id = {span.context.span_id: span for span in spans.get_finished_spans()}
    chain = []
    parent = post.parent
    while parent is not None and parent.span_id in by_id:
        chain.append(by_id[parent.span_id].name)
        parent = by_id[parent.span_id].parent
    assert chain == ["step webhook", "process api_webhook"]
