"""One trace from the PHP core's request to the last webhook, in real processes exporting over
OTLP/HTTP to a receiver the test starts (devtools/otlp.py): the production web server, the
control process and the crawl, analysis and notify pools, with ``OTEL_*`` set as an operator sets it
(docs/operations.md, "Traces"). One API submission of a crawl of the demo web; every line every
process writes is JSON (``LEITSTAND_LOG_FORMAT=json``)."""

import signal
import subprocess
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from api.tokens import token_create
from devtools.otlp import OtlpReceiver
from jobs.models import Client, Job, State
from tests.processes.test_json_logs import json_lines
from tests.support.db import child_env
from tests.support.pools import PoolProcesses, demo_web_env, wait_for
from tests.support.receiver import Receiver
from tests.support.servers import free_port, production_server, wait_until_answers
from workers.pipeline import demoweb
from workers.pipeline.services import asset_register, source_upsert

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SETTLED = {State.DONE, State.DEAD, State.RECHECK_DUE, State.READY_FOR_REVIEW, State.CANCELLED}
TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"  # the PHP core's own span around its call


def ancestors(span, by_id) -> list:
    """The span's parents up to its trace's root, nearest first (as far as the receiver has them)."""
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def attempt_of(span, by_id):
    """The attempt a span was made in: its nearest CONSUMER ancestor."""
    return next((parent for parent in ancestors(span, by_id) if parent.kind == "CONSUMER"), None)


def test_one_api_crawl_submission_is_one_trace_from_request_to_webhook(tmp_path):
    collector, php = OtlpReceiver(), Receiver(200)
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_SERVICE_NAME": "leitstand-e2e",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    port = free_port()
    with demoweb.DemoWeb() as web:
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        # Only the submitted crawl: the source's schedule would start a run of its own (outside any
        # trace) whose analyses of the same images are shared with it. Its window is hours away.
        away = (datetime.now(UTC) + timedelta(hours=12)).time().replace(second=0, microsecond=0)
        later = (datetime.combine(datetime.now(UTC).date(), away) + timedelta(minutes=1)).time()
        window = {"window_start": away, "window_end": later, "time_zone": "UTC"}
        source = source_upsert(**{**web.sources()[0], "max_depth": 1, **window})
        _, secret = token_create(name="php", scopes=["jobs:read", "jobs:write", "jobs:all"], client="php-core")
        Client.objects.filter(name="php-core").update(webhook_url=php.url, webhook_secret="s3cret")
        env = {**otel, **demo_web_env(web), "LEITSTAND_NOTIFY_ALLOWED_TARGETS": php.target}
        pools = PoolProcesses(str(tmp_path), **env, LEITSTAND_LOG_FORMAT="json")
        web_env = child_env(
            **env,
            LEITSTAND_DEBUG="false",
            LEITSTAND_ALLOWED_HOSTS="127.0.0.1",
            LEITSTAND_WEB_BIND=f"127.0.0.1:{port}",
            LEITSTAND_WEB_WORKERS="1",
            LEITSTAND_LOG_FORMAT="json",
            LEITSTAND_STATIC_ROOT=str(tmp_path / "static"),
        )
        server = production_server(web_env)
        base = f"http://127.0.0.1:{port}"
        try:
            for name in ("control", "crawl", "analysis", "notify"):
                pools.start(name)
            wait_until_answers(f"{base}/healthz", server, timeout=30)
            answer = httpx.post(
                f"{base}/api/v1/jobs",
                json={
                    "type": "crawl",
                    "payload": {"source_id": source.id, "url": source.base_url, "depth": 0, "run": "traced"},
                    "idempotency_key": "traced-crawl-1",
                },
                headers={"Authorization": f"Bearer {secret}", "traceparent": f"00-{TRACE}-{CALLER_SPAN}-01"},
            )
            assert answer.status_code == 201, answer.text
            crawl = Job.objects.get(pk=answer.json()["id"])
            wait_for(
                lambda: pools.check_running()
                and Job.objects.filter(type="analysis").exists()
                and not Job.objects.exclude(state__in=SETTLED).exists()
                and any(str(crawl.pk) in body.decode() for _, body in php.deliveries),
                timeout=120,
                interval=0.5,
                message="the crawl, its analyses and the crawl's webhook to settle",
            )
            analyses = Job.objects.filter(type="analysis").count()
            wait_for(
                lambda: any(s.name == "process api_webhook" for s in collector.received())
                and sum(s.name == "process analysis" for s in collector.received()) >= analyses,
                timeout=20,
                message="the webhook delivery's and the analyses' spans to be exported",
            )
        finally:
            pools.stop_all()
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=40)
            except subprocess.TimeoutExpired:
                server.kill()
            php.close()
    collector.close()

    spans = collector.received()
    assert {span.service for span in spans} == {"leitstand-e2e"}
    traced = [span for span in spans if span.trace_id == TRACE]
    by_id = {span.span_id: span for span in traced}

    # The API request: a server span whose parent is the PHP core's span; its answer named it.
    servers = [span for span in traced if span.kind == "SERVER"]
    assert len(servers) == 1, [(s.name, s.attributes) for s in servers]
    (request,) = servers
    assert (request.name, request.parent_span_id) == ("POST /api/v1/jobs", CALLER_SPAN)
    assert answer.headers["traceresponse"] == f"00-{TRACE}-{request.span_id}-01"

    # The crawl's attempt: a consumer span, child of the request; its steps and fetches inside it.
    # (An attempt deferred while the host's slot was taken is released and claimed again: another
    # first attempt, so another child of the request.)
    attempts = [s for s in traced if s.kind == "CONSUMER" and s.attributes["messaging.message.id"] == str(crawl.pk)]
    assert all(s.name == "process crawl" and s.parent_span_id == request.span_id for s in attempts)
    outcomes = [s.attributes.get("leitstand.attempt.outcome") for s in attempts]
    done = [s for s in attempts if s.attributes.get("leitstand.attempt.outcome") == "done"]
    assert len(done) == 1, outcomes
    (attempt,) = done
    assert attempt.attributes["leitstand.job.wait_ms"] >= 0
    steps = [s for s in traced if s.parent_span_id == attempt.span_id and s.name.startswith("step ")]
    assert {"step robots", "step fetch"} <= {s.name for s in steps}
    fetches = [s for s in traced if s.kind == "CLIENT" and attempt_of(s, by_id) == attempt]
    assert any(s.attributes.get("url.full") == source.base_url for s in fetches)
    assert all(s.attributes["http.request.method"] == "GET" for s in fetches), [(s.name, s.attributes) for s in fetches]

    # Every analysis job (of this crawl and of its child crawls) ran as a descendant of the crawl's attempt.
    analyses = {str(job.pk) for job in Job.objects.filter(type="analysis")}
    analysed = [s for s in traced if s.name == "process analysis"]
    assert {s.attributes["messaging.message.id"] for s in analysed} == analyses
    assert all(attempt in ancestors(s, by_id) for s in analysed)
    assert any(s.kind == "CLIENT" and attempt_of(s, by_id) in analysed for s in traced), "an image download"

    # The webhook back to the PHP core: its delivery in the same trace, its POST the receiver's parent.
    crawl_hooks = [
        (headers, body)
        for headers, body in php.deliveries
        if str(crawl.pk) in body.decode() and "job.done" in body.decode()
    ]
    assert crawl_hooks, "the crawl's job.done webhook"
    received_parent = crawl_hooks[0][0]["traceparent"].split("-")
    assert received_parent[1] == TRACE
    post = by_id[received_parent[2]]
    assert post.kind == "CLIENT" and post.name == "POST" and post.attributes["http.response.status_code"] == 200
    assert [s.name for s in ancestors(post, by_id)][:2] == ["step webhook", "process api_webhook"]
    assert request in ancestors(post, by_id), "the delivery is created in the trace of the job it is about"

    # No crawled site was told the trace; every process wrote only JSON lines.
    assert not set().union(*(site.header_names for site in web.sites)) & {"traceparent", "tracestate", "baggage"}
    for name in ("control", "crawl", "analysis", "notify"):
        json_lines(pools.log(name))
    json_lines(server.stdout.read().decode())
