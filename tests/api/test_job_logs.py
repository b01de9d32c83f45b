"""A job's log lines through the API (``GET /api/v1/jobs/{id}?include=logs``) and in its export: what
each attempt kept of its handler's warnings and errors (jobs/logs.py), for its own client only."""

import io
import json
import logging
import time
import uuid

import pytest
from django.core.management import call_command

from api.tokens import token_create
from jobs import leases
from jobs.errors import TransientError
from jobs.insert import job_insert
from jobs.models import Client
from jobs.retry import RetryPolicy
from workers.runtime.context import Done

pytestmark = pytest.mark.django_db(transaction=True)


def bearer(client_name: str, *scopes: str) -> dict:
    _, clear = token_create(
        name=f"{client_name}-{uuid.uuid4().hex[:6]}", client=client_name, scopes=["jobs:read", *scopes]
    )
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


@pytest.fixture
def logged_job(job_type, pool_runtime):
    """A job of the client php-core whose first attempt fails with a warning and whose second succeeds."""
    calls = []

    def handler(context):
        calls.append(1)
        logging.getLogger("pipeline.fetch").warning("attempt %d: upstream slow", len(calls))
        if len(calls) == 1:
            raise TransientError("upstream answered 503")
        return Done("ok")

    job_type("logged", handler, expected_paths=("",), retry=RetryPolicy(base_seconds=0.01, cap_seconds=0.01))
    bearer("php-core")  # makes the client
    job = job_insert(
        type="logged",
        pool="crawl",
        idempotency_key="logged-1",
        payload={},
        actor="test",
        client_id=Client.objects.get(name="php-core").pk,
    ).job
    pool_runtime("crawl").wake()
    time.sleep(0.05)
    leases.retries_promote_due()
    pool_runtime("crawl").wake()
    assert len(calls) == 2
    return job


def test_include_logs_gives_each_attempt_s_lines_oldest_first(client, logged_job):
    headers = bearer("php-core")
    answer = client.get(f"/api/v1/jobs/{logged_job.pk}?include=logs", **headers)
    assert answer.status_code == 200
    logs = answer.json()["logs"]
    assert [(entry["attempt"], entry["outcome"], entry["dropped"]) for entry in logs] == [
        (1, "failed", 0),
        (2, "completed", 0),
    ]
    assert [[line["message"] for line in entry["lines"]] for entry in logs] == [
        ["attempt 1: upstream slow"],
        ["attempt 2: upstream slow"],
    ]
    assert logs[0]["lines"][0]["level"] == "WARNING" and logs[0]["lines"][0]["logger"] == "pipeline.fetch"
    assert all("exception" not in line for entry in logs for line in entry["lines"]), "tracebacks stay inside"
    assert client.get(f"/api/v1/jobs/{logged_job.pk}", **headers).json()["logs"] is None, "only when asked"


def test_an_unknown_include_is_refused_by_name_and_another_client_sees_nothing(client, logged_job):
    refused = client.get(f"/api/v1/jobs/{logged_job.pk}?include=secrets", **bearer("php-core"))
    assert refused.status_code == 422 and "include" in refused.text
    assert client.get(f"/api/v1/jobs/{logged_job.pk}?include=logs", **bearer("partner")).status_code == 404


def test_the_export_holds_each_attempt_s_lines(logged_job):
    out = io.StringIO()
    call_command("export_job", str(logged_job.pk), stdout=out)
    attempts = json.loads(out.getvalue())["attempts"]
    assert [a["log_lines"]["lines"][0]["message"] for a in attempts] == [
        "attempt 1: upstream slow",
        "attempt 2: upstream slow",
    ]
