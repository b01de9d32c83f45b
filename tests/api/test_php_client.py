"""The PHP client (clients/php) run for real with php-cli against a live test server: it submits a
job through a proxy that loses the first answer (the retry with the same key makes one job), reads
it back, lists it, meets the API's errors; and the PHP webhook receiver verifies a real delivery
from the notify pool, rejects a forged one and records a repeated one once."""

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from api.tokens import token_create
from jobs.clients import client_lanes_set, client_trace_trust_set, client_webhook_set
from jobs.models import Job, State
from jobs.services import job_confirm
from workers.runtime.webhook import sign, standard_headers
from workers.runtime.webhook_sweep import deliveries_make

PHP_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "php"
SECRET = "php-webhook-secret-3"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"  # the trace clients/php/tests sends
pytestmark = pytest.mark.django_db(transaction=True)

if shutil.which("php") is None:  # ./scripts/test installs php-cli and php-curl; a bare pytest run names them
    pytest.fail(
        "the PHP client tests need Debian's php-cli and php-curl: sudo apt-get install php-cli php-curl", pytrace=False
    )


class AnswerLosingProxy:
    """Forwards requests to the live server; the answer to the first POST reaches the server's
    database but never the client (the connection is closed instead): a lost answer."""

    def __init__(self, upstream: str) -> None:
        self.requests, proxy = [], self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = httpx.request(self.command, upstream + self.path, headers=headers, content=body, timeout=10)
                proxy.requests.append((self.command, self.path))
                if self.command == "POST" and sum(method == "POST" for method, _ in proxy.requests) == 1:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # the answer is lost on the way back
                    return
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(answer.content)
                self.close_connection = True

            do_GET = do_POST = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def php_receiver(tmp_path):
    """examples/webhook_receiver.php under PHP's built-in web server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    events = tmp_path / "events"
    server = subprocess.Popen(
        ["php", "-S", f"127.0.0.1:{port}", str(PHP_CLIENT / "examples" / "webhook_receiver.php")],
        env={
            **os.environ,
            "LEITSTAND_WEBHOOK_SECRET": SECRET,
            "LEITSTAND_CLIENT": "php-core",
            "LEITSTAND_EVENTS_DIR": str(events),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/hook"
    for _ in range(100):
        try:
            httpx.get(url, timeout=0.5)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    yield url, events
    server.terminate()
    server.wait(timeout=10)


def test_the_php_client_submits_reads_and_receives_verified_webhooks(
    live_server, php_receiver, settings, pool_runtime, tmp_path
):
    """The PHP client's PHPUnit suite (clients/php/phpunit.xml.dist, Debian's phpunit) against this
    live server, every test run and none skipped; then what it did, checked in the database."""
    created, token = token_create(name="php-core", scopes=["jobs:read", "jobs:write", "jobs:synthetic"])
    client_trace_trust_set(client_id=created.client_id, trusted=True)  # the core's traces are ours: joined
    client_lanes_set(client_id=created.client_id, most_urgent_lane=0)  # and its urgency: every lane
    proxy = AnswerLosingProxy(live_server.url)
    results_file = tmp_path / "results.json"
    try:
        run = subprocess.run(
            ["phpunit", "--configuration", str(PHP_CLIENT / "phpunit.xml.dist")],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=PHP_CLIENT,
            env={
                **os.environ,
                "LEITSTAND_URL": proxy.url,
                "LEITSTAND_TOKEN": token,
                "LEITSTAND_RESULTS": str(results_file),
            },
        )
    finally:
        proxy.close()
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^OK \(\d+ tests, \d+ assertions\)$", run.stdout, re.MULTILINE), run.stdout  # none skipped
    results = json.loads(results_file.read_text())
    assert results["first_submit_attempts"] == 2, "the lost answer was retried"
    assert results["first_submit_created"] is False, "the retry found the job the lost answer had created"
    job = Job.objects.get(idempotency_key="php-order-1")
    once = Job.objects.filter(type="synthetic", batch__isnull=True).exclude(idempotency_key="php-traced-1")
    assert once.count() == 1 and str(job.pk) == results["job_id"]
    assert Job.objects.filter(batch_id=results["batch_id"]).count() == 2
    traced = Job.objects.get(pk=results["traced_job_id"])  # a header with a line break is not sent
    assert (traced.trace_parent, traced.trace_state) == (TRACEPARENT, "")

    # The job ends; its webhook goes to the PHP receiver, which verifies and records it.
    receiver_url, events = php_receiver
    settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "url": receiver_url, "secret": SECRET}
    client_webhook_set(client_id=job.client_id, url="", actor="test")  # the operator: the global webhook is its
    pool_runtime("synthetic").wake()
    Job.objects.filter(pk=job.pk).update(trace_parent=TRACEPARENT)  # as if submitted in a trace
    job_confirm(job_id=job.pk, actor="php-test")
    assert deliveries_make() == 1
    pool_runtime("notify").wake()
    delivery = Job.objects.get(type="api_webhook")
    assert delivery.state == State.DONE, delivery.error_message
    (recorded,) = events.iterdir()
    event = json.loads(recorded.read_text())
    assert (event["type"], event["job"]["id"], event["job"]["correlation_id"]) == (
        "job.done",
        str(job.pk),
        "php-case-1",
    )
    assert event.pop("trace_context") == {"traceparent": TRACEPARENT}, "the receiver reads the job's trace"

    # A forged delivery is refused; a repeated one is acknowledged and recorded once.
    body = json.dumps(event).encode()
    forged = httpx.post(
        receiver_url, content=body, headers={"X-Leitstand-Signature": sign("wrong", int(time.time()), body)}
    )
    assert forged.status_code == 401 and "does not match" in forged.text
    again = httpx.post(
        receiver_url, content=body, headers={"X-Leitstand-Signature": sign(SECRET, int(time.time()), body)}
    )
    assert again.status_code == 204 and len(list(events.iterdir())) == 1
    # Verified, but about another client's job (issue 54, item 12): refused, not acted on.
    theirs = json.dumps({**event, "id": "evt_theirs", "client": "partner"}).encode()
    answer = httpx.post(
        receiver_url, content=theirs, headers={"X-Leitstand-Signature": sign(SECRET, int(time.time()), theirs)}
    )
    assert answer.status_code == 422 and "not about a job of client php-core" in answer.text
    assert len(list(events.iterdir())) == 1

    # The Standard Webhooks form alone (LEITSTAND_WEBHOOK_SIGNATURES=standard): verified the same way.
    now = int(time.time())
    standard = standard_headers(SECRET, event["id"], now, body)
    assert httpx.post(receiver_url, content=body, headers=standard).status_code == 204
    refused = {
        "another secret": standard_headers("wrong", event["id"], now, body),
        "another body": standard_headers(SECRET, event["id"], now, body + b" "),
        "another event's ID": standard_headers(SECRET, "evt_other", now, body),
        "a day old": standard_headers(SECRET, event["id"], now - 86400, body),
    }
    for why, headers in refused.items():
        answer = httpx.post(receiver_url, content=body, headers=headers)
        assert answer.status_code == 401, why
    assert len(list(events.iterdir())) == 1
