"""Alert notifications as jobs: a local webhook receiver gets signed deliveries; a failing receiver
leads to retries and finally a dead letter; e-mail through Django's mail settings."""

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from dashboard import alerts
from dashboard.notify import SIGNATURE_HEADER
from jobs import leases
from jobs.models import Job, State

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "hook-secret-42"


class Receiver:
    def __init__(self, status: int) -> None:
        self.status, self.deliveries = status, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.deliveries.append((dict(self.headers), body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver(settings):
    made = []

    def start(status=200):
        made.append(Receiver(status))
        settings.LEITSTAND_ALERT_ROUTES = {"operations": {"webhook": made[-1].url, "secret": SECRET,
                                                          "email": ["oncall@example.org"]}}
        settings.LEITSTAND_ALERTS = {rule: {**config, "for_seconds": 0, "clear_seconds": 0}
                                     for rule, config in settings.LEITSTAND_ALERTS.items()}
        return made[-1]

    yield start
    for server in made:
        server.close()


def fire(make_job, db_clock):
    make_job("crawl", pool="crawl")
    alerts.alerts_evaluate(now=db_clock.now())
    return Job.objects.filter(type="alert_notify")


def test_a_fired_alert_is_delivered_signed_and_by_mail(receiver, make_job, db_clock, pool_runtime):
    hook = receiver(200)
    deliveries = fire(make_job, db_clock)
    assert sorted(j.payload["channel"] for j in deliveries) == ["email", "webhook"]
    pool_runtime("notify").wake()
    assert {j.state for j in Job.objects.filter(type="alert_notify")} == {State.DONE}
    (headers, body), = hook.deliveries
    timestamp, signature = (part.split("=", 1)[1] for part in headers[SIGNATURE_HEADER].split(","))
    expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(signature, expected), "the receiver can verify the signature over the raw body"
    message = json.loads(body)
    assert (message["rule"], message["event"], message["scope"]) == ("pool_no_consumers", "fired", "pool:crawl")
    assert message["runbook"] == "/admin/runbooks/pool_no_consumers/"
    assert len(mail.outbox) == 1 and mail.outbox[0].subject == "[Leitstand] fired: pool_no_consumers pool:crawl"


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
    assert webhook.error_class == "dashboard.notify.WebhookRefused" and "answered 500" in webhook.error_message
    assert len(hook.deliveries) == settings.LEITSTAND_NOTIFY["max_attempts"], "one delivery per attempt"
