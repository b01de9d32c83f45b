"""Correlation IDs travel from the API request to the job, its step events, its children, the
webhooks (tests/runtime/test_webhooks.py) and every log line written for the request or the job."""

import json
import logging

import pytest

from api.tokens import token_create
from jobs.logs import ContextFilter, formatter
from jobs.models import Job, StepEvent
from jobs.retry import RetryPolicy
from workers.runtime.context import Done
from workers.runtime.registry import JobType, registry

pytestmark = pytest.mark.django_db


@pytest.fixture
def log_lines():
    """Log lines as production formats them (the format of settings.LOGGING, with its filter)."""
    from django.conf import settings

    records = []
    handler = logging.Handler(level=logging.INFO)
    handler.emit = records.append
    handler.addFilter(ContextFilter())
    handler.setFormatter(formatter("plain", settings.LOG_PLAIN_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    previous = root.level
    root.setLevel(logging.INFO)
    yield lambda: [handler.format(record) for record in records]
    root.removeHandler(handler)
    root.setLevel(previous)


def test_an_api_request_s_correlation_id_reaches_the_job_its_steps_and_the_log(client, log_lines, pool_runtime):
    _, clear = token_create(name="php", scopes=["jobs:write", "jobs:synthetic"])
    response = client.post(
        "/api/v1/jobs",
        json.dumps({"type": "synthetic", "payload": {"steps": ["a", "b"]}, "idempotency_key": "k1"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {clear}",
        HTTP_X_CORRELATION_ID="php-request-9",
    )
    assert response.status_code == 201 and response["X-Correlation-ID"] == "php-request-9"
    job = Job.objects.get(pk=response.json()["id"])
    assert job.correlation_id == "php-request-9"
    assert any(
        "[php-request-9]" in line and f"job {job.pk} (synthetic) created by token php" in line for line in log_lines()
    )

    pool_runtime("synthetic").wake()
    assert list(StepEvent.objects.filter(job=job).values_list("step", "correlation_id")) == [
        ("a", "php-request-9"),
        ("b", "php-request-9"),
    ]


def test_a_handler_s_log_lines_carry_its_job_s_correlation_id(make_job, log_lines, pool_runtime):
    def handler(context):
        logging.getLogger("leitstand.test.handler").info("working on %s", context.payload["n"])
        return Done(reason="logged")

    declared = registry.register(
        JobType(
            name="logs_test",
            handler=handler,
            pool="crawl",
            timeout_seconds=20,
            lease_seconds=30,
            heartbeat_seconds=5,
            retry=RetryPolicy(),
            processing_version="logs@1",
            expected_paths=("x",),
        )
    )
    try:
        parent = make_job("crawl", correlation_id="case-4711", payload={"url": "https://example.org/"})
        child = make_job("logs_test", pool="crawl", parent_id=parent.pk, payload={"n": 1})
        assert child.correlation_id == "case-4711", "a child job carries its parent's correlation ID"
        Job.objects.filter(type="crawl").update(due_at="2999-01-01T00:00:00Z")  # only the child runs now
        pool_runtime("crawl").wake()
    finally:
        registry.unregister(declared.name)
    assert any("leitstand.test.handler" in line and "[case-4711] working on 1" in line for line in log_lines())
    assert Job.objects.get(pk=child.pk).completion_reason == "logged"
