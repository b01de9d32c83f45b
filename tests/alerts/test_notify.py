"""Alert notifications as jobs: a local webhook receiver gets signed deliveries; a failing receiver
leads to retries and finally a dead letter; e-mail through Django's mail settings."""

import json

import pytest
from django.core import mail

from alerts import evaluation
from jobs import leases
from jobs.models import Job, State
from tests.support.receiver import Receiver, signature_valid
from workers.runtime.webhook import SIGNATURE_HEADER

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "hook-secret-42"


@pytest.fixture
def receiver(settings):
    made = []

    def start(status=200):
        made.append(Receiver(status))
        settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = [made[-1].target]
        settings.LEITSTAND_ALERT_ROUTES = {
            "operations": {"webhook": made[-1].url, "secret": SECRET, "email": ["oncall@example.org"]}
        }
        settings.LEITSTAND_ALERTS = {
            rule: {**config, "for_seconds": 0, "clear_seconds": 0} for rule, config in settings.LEITSTAND_ALERTS.items()
        }
        return made[-1]

    yield start
    for server in made:
        server.close()


def fire(make_job, db_clock):
    make_job("crawl", pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    return Job.objects.filter(type="alert_notify")


def test_a_fired_alert_is_delivered_signed_and_by_mail(receiver, make_job, db_clock, pool_runtime):
    hook = receiver(200)
    deliveries = fire(make_job, db_clock)
    assert sorted(j.payload["channel"] for j in deliveries) == ["email", "webhook"]
    pool_runtime("notify").wake()
    assert {j.state for j in Job.objects.filter(type="alert_notify")} == {State.DONE}
    ((headers, body),) = hook.deliveries
    assert signature_valid(SECRET, headers[SIGNATURE_HEADER], body), (
        "the receiver can verify the signature over the raw body"
    )
    message = json.loads(body)
    assert (message["rule"], message["event"], message["scope"]) == ("pool_no_consumers", "fired", "pool:crawl")
    assert message["runbook"] == "/admin/runbooks/pool_no_consumers/", "relative without LEITSTAND_PUBLIC_URL"
    assert len(mail.outbox) == 1 and mail.outbox[0].subject == "[Leitstand PAGE] fired: pool_no_consumers — pool crawl"


def test_a_failing_receiver_is_retried_then_dead_lettered(receiver, make_job, db_clock, pool_runtime, settings):
    hook = receiver(500)
    fire(make_job, db_clock)
    webhook = Job.objects.get(type="alert_notify", payload__channel="webhook")
    runtime = pool_runtime("notify")
    for _ in range(12):
        runtime.wake()
        db_clock.advance(1000)
        leases.retries_promote_due()
        if Job.objects.get(pk=webhook.pk).state == State.DEAD:
            break
    webhook.refresh_from_db()
    assert webhook.state == State.DEAD and webhook.attempts == settings.LEITSTAND_NOTIFY["max_attempts"]
    assert webhook.error_class == "workers.runtime.webhook.WebhookRefused" and "answered 500" in webhook.error_message
    assert len(hook.deliveries) == settings.LEITSTAND_NOTIFY["max_attempts"], "one delivery per attempt"


def test_a_receivers_url_is_shown_to_people_as_scheme_and_host_only(
    receiver, make_job, db_clock, pool_runtime, settings
):
    from jobs.models import StepEvent

    hook = receiver(500)
    route = settings.LEITSTAND_ALERT_ROUTES["operations"]
    secret_url = f"{hook.url.rstrip('/')}/services/T0K3N?key=s3cr3t"
    settings.LEITSTAND_ALERT_ROUTES = {"operations": {**route, "webhook": secret_url}}
    fire(make_job, db_clock)
    webhook = Job.objects.get(type="alert_notify", payload__channel="webhook")
    pool_runtime("notify").wake()
    webhook.refresh_from_db()
    assert hook.deliveries, "delivered to the whole URL"
    seen = [webhook.error_message, webhook.completion_reason]
    seen += [json.dumps(step.data) for step in StepEvent.objects.filter(job=webhook)]
    assert "answered 500" in webhook.error_message and "127.0.0.1" in webhook.error_message
    assert not [text for text in seen if "T0K3N" in text or "s3cr3t" in text], seen


def test_a_route_may_not_send_to_a_private_address_unless_allow_listed(
    receiver, make_job, db_clock, pool_runtime, settings
):
    """A webhook on loopback (or in a private network, or the cloud's metadata address) is refused
    before anything is sent, unless whoever deploys allow-listed it; the job says why."""
    hook = receiver(200)
    settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = []
    fire(make_job, db_clock)
    pool_runtime("notify").wake()
    webhook = Job.objects.get(type="alert_notify", payload__channel="webhook")
    assert webhook.state == State.DEAD and not hook.deliveries
    assert "is not a destination notifications may go to" in webhook.error_message
    assert "not a public address" in webhook.error_message
