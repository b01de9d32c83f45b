"""Correlation IDs travel from the API request to the job, its step events, its children, the
webhooks (tests/runtime/test_webhooks.py) and every log line written for the request or the job."""

import json
import logging

import pytest

from api.tokens import token_create
from jobs.logs import formatter
from jobs.models import Job, StepEvent
from workers.runtime.context import Done

pytestmark = pytest.mark.django_db


@pytest.fixture
def log_lines(log_records):
    """Log lines as production formats them (the format of settings.LOGGING, with its filter)."""
    from django.conf import settings

    plain = formatter("plain", settings.LOG_PLAIN_FORMAT)
    return lambda: [plain.format(record) for record in log_records]


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


def test_a_handler_s_log_lines_carry_its_job_s_correlation_id(make_job, log_lines, pool_runtime, job_type):
    def handler(context):
        logging.getLogger("leitstand.test.handler").info("working on %s", context.payload["n"])
        return Done(reason="logged")

    job_type("logs_test", handler, processing_version="logs@1")
    parent = make_job("crawl", correlation_id="case-4711", payload={"url": "https://example.org/"})
    child = make_job("logs_test", pool="crawl", parent_id=parent.pk, payload={"n": 1})
    assert child.correlation_id == "case-4711", "a child job carries its parent's correlation ID"
    Job.objects.filter(type="crawl").update(due_at="2999-01-01T00:00:00Z")  # only the child runs now
    pool_runtime("crawl").wake()
    assert any("leitstand.test.handler" in line and "[case-4711] working on 1" in line for line in log_lines())
    assert Job.objects.get(pk=child.pk).completion_reason == "logged"
