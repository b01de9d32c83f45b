"""The API's trust boundary (issue 17): which types a client may submit, whose namespace its
idempotency keys live in, and what a repeat under the same key must match. Each test performs the
attack and shows that it is refused and that nothing else was lost."""

import json
import uuid

import pytest

from api.tokens import token_create
from jobs.insert import job_insert
from jobs.models import Batch, Job, State, WebhookEvent
from workers.runtime.registry import registry
from workers.runtime.services import job_submit
from workers.runtime.webhook_sweep import deliveries_make

pytestmark = pytest.mark.django_db

INTERNAL = ["api_webhook", "alert_notify", "shadow", "recheck"]
EVERY_SCOPE = ["jobs:read", "jobs:write", "jobs:synthetic", "reviews:write"]


@pytest.fixture
def bearer():
    def make(*scopes, name=None):
        _, clear = token_create(name=name or uuid.uuid4().hex[:8], scopes=list(scopes or EVERY_SCOPE))
        return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}

    return make


def submit(client, headers, fields=None, **http):
    body = {"type": "synthetic", "payload": {}, "idempotency_key": "k-1", **(fields or {})}
    return client.post("/api/v1/jobs", json.dumps(body), content_type="application/json", **headers, **http)


def submit_batch(client, headers, jobs, key="b-1"):
    body = {"key": key, "name": "import", "jobs": jobs}
    return client.post("/api/v1/batches", json.dumps(body), content_type="application/json", **headers)


def test_only_the_declared_types_are_submittable_and_each_names_its_scope():
    assert {t.name: t.client_scope for t in registry.submittable()} == {
        "analysis": "jobs:all",
        "crawl": "jobs:all",
        "synthetic": "jobs:synthetic",
    }


@pytest.mark.parametrize("job_type", INTERNAL)
def test_an_internal_type_is_refused_naming_the_field(client, bearer, job_type):
    payload = {"event": {"id": "evt_1", "type": "job.done"}, "plan_id": 1, "sequence": 1, "job_id": "x"}
    answer = submit(client, bearer(), {"type": job_type, "payload": payload})
    assert answer.status_code == 422, answer.content
    assert answer.json()["invalid_fields"][0]["field"] == "type"
    assert "crawl" in answer.json()["detail"] and job_type not in answer.json()["detail"].split("submit: ")[1]
    answer = submit_batch(client, bearer(), [{"type": job_type, "payload": payload, "idempotency_key": "k"}])
    assert answer.status_code == 422 and answer.json()["invalid_fields"][0]["field"] == "jobs[0].type"
    assert not Job.objects.exists() and not Batch.objects.exists()


def test_a_type_needs_its_own_scope(client, bearer):
    writer = bearer("jobs:write")
    assert submit(client, writer).status_code == 403  # synthetic needs jobs:synthetic
    answer = submit_batch(client, writer, [{"type": "synthetic", "payload": {}, "idempotency_key": "k"}])
    assert answer.status_code == 403 and not Job.objects.exists()


def test_keys_live_in_the_clients_own_namespace(client, bearer):
    system = job_submit(
        job_type="synthetic", payload={"steps": ["s"]}, idempotency_key="plan-1:1", actor="recheck-planner"
    )
    first, second = bearer(name="shop"), bearer(name="archive")
    mine = submit(client, first, {"payload": {"steps": ["a"]}, "idempotency_key": "plan-1:1"})
    theirs = submit(client, second, {"payload": {"steps": ["b"]}, "idempotency_key": "plan-1:1"})
    assert (mine.status_code, theirs.status_code) == (201, 201), "no client collides with the system or another"
    assert len({system.job.pk, mine.json()["id"], theirs.json()["id"]}) == 3
    assert mine.json()["idempotency_key"] == "plan-1:1", "the client sees its key as it sent it"
    assert Job.objects.get(pk=mine.json()["id"]).key_namespace == "client:shop"
    assert Job.objects.get(pk=system.job.pk).key_namespace == ""
    assert submit(client, first, {"payload": {"steps": ["a"]}, "idempotency_key": "plan-1:1"}).status_code == 200


def test_a_repeat_must_be_the_same_request_not_only_the_same_payload(client, bearer):
    writer = bearer()
    assert submit(client, writer, {"priority": 6}).status_code == 201
    assert submit(client, writer, {"priority": 6}, HTTP_X_CORRELATION_ID="any").status_code == 200
    differences = (
        {"priority": 7},
        {"source": "elsewhere"},
        {"correlation_id": "case-9"},
        {"due_at": "2030-01-01T00:00:00Z"},
    )
    for difference in differences:
        answer = submit(client, writer, {"priority": 6, **difference})
        assert answer.status_code == 422, difference
        assert answer.json()["type"] == "/problems/idempotency-conflict"
    assert Job.objects.count() == 1 and Job.objects.get().priority == 6


def test_one_bad_outbox_event_is_recorded_and_the_rest_are_delivered_once(settings, make_job):
    settings.LEITSTAND_WEBHOOK = {
        **settings.LEITSTAND_WEBHOOK,
        "url": "http://127.0.0.1:9/hook",
        "secret": "s",
        "events": ["job.dead"],
    }
    jobs = [make_job() for _ in range(3)]
    for job in jobs:
        Job.objects.filter(pk=job.pk).update(state=State.DEAD)
        WebhookEvent.objects.create(kind="job.dead", job_id=job.pk)
    squatted = WebhookEvent.objects.order_by("id")[1]
    # The system's own namespace taken under the key the outbox uses next, with another payload:
    job_insert(type="api_webhook", pool="notify", idempotency_key=f"webhook-event-{squatted.pk}", payload={}, actor="x")
    assert deliveries_make() == 2
    squatted.refresh_from_db()
    assert squatted.error.startswith("IdempotencyConflict")
    assert list(WebhookEvent.objects.values_list("pk", flat=True)) == [squatted.pk]
    assert deliveries_make() == 0, "the delivered events are gone; the bad one waits for an operator"
    assert Job.objects.filter(type="api_webhook").count() == 3


@pytest.mark.parametrize("correlation", ["case-1\r\nX-Forged: yes", "case\x01", "a" * 256])
def test_a_correlation_id_is_printable_and_bounded(client, bearer, correlation):
    writer = bearer()
    answer = submit(client, writer, {"correlation_id": correlation})
    assert answer.status_code == 422 and answer.json()["invalid_fields"][0]["field"] == "correlation_id"
    answer = submit(client, writer, {"idempotency_key": "k-2"}, HTTP_X_CORRELATION_ID=correlation)
    assert answer.status_code == 422 and answer.json()["invalid_fields"][0]["field"] == "X-Correlation-ID"
    assert "X-Correlation-ID" not in answer.headers
    job = {"type": "synthetic", "payload": {}, "idempotency_key": "k"}
    body = {"key": "b", "name": "n", "correlation_id": correlation, "jobs": [job]}
    answer = client.post("/api/v1/batches", json.dumps(body), content_type="application/json", **writer)
    assert answer.status_code == 422
    assert not Job.objects.exists() and not Batch.objects.exists()


def test_a_token_has_a_budget_of_jobs_not_only_of_requests(client, bearer, settings):
    settings.LEITSTAND_API_JOBS_PER_MINUTE = 5
    writer = bearer()
    jobs = [{"type": "synthetic", "payload": {}, "idempotency_key": f"k{n}"} for n in range(6)]
    answer = submit_batch(client, writer, jobs)
    assert answer.status_code == 429 and "5 jobs a minute" in answer.json()["detail"]
    assert 1 <= int(answer["Retry-After"]) <= 60
    assert not Job.objects.exists() and not Batch.objects.exists()
    assert submit(client, bearer(), {"idempotency_key": "other-token"}).status_code == 201, "budgets are per token"


def test_a_single_submission_counts_its_job_with_the_request(client, bearer, settings):
    settings.LEITSTAND_API_JOBS_PER_MINUTE = 2
    writer, reader = bearer(), bearer("jobs:read")
    answers = [submit(client, writer, {"idempotency_key": f"k{n}"}) for n in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 429]
    assert "2 jobs a minute (3 this minute)" in answers[2].json()["detail"] and Job.objects.count() == 2
    refused = [submit(client, reader, {"idempotency_key": f"r{n}"}).status_code for n in range(3)]
    assert refused == [403, 403, 403], "a token that may not write spends no jobs budget"
    assert client.get("/api/v1/jobs", **writer).status_code == 200, "reading is within the request budget"


def test_a_valid_token_costs_one_statement_for_its_check_and_counts(client, bearer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    writer = bearer()
    submit(client, writer)  # the minute's first request also tidies older windows
    for request in (lambda: client.get("/api/v1/jobs?limit=1", **writer), lambda: submit(client, writer)):
        with CaptureQueriesContext(connection) as queries:
            assert request().status_code in (200, 201)
        budget = [q["sql"] for q in queries if "jobs_apitoken" in q["sql"] or "jobs_apiratewindow" in q["sql"]]
        assert len(budget) == 1 and "INSERT INTO jobs_apiratewindow" in budget[0]


def test_guessing_tokens_is_limited_per_address(client, bearer, settings):
    settings.LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE = 3
    guesses = [
        client.get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Bearer lst_{n:012x}_guess", REMOTE_ADDR="203.0.113.9")
        for n in range(5)
    ]
    assert [g.status_code for g in guesses] == [401, 401, 401, 429, 429]
    other = client.get("/api/v1/jobs", HTTP_AUTHORIZATION="Bearer lst_000000000000_guess", REMOTE_ADDR="203.0.113.10")
    assert other.status_code == 401, "another address has its own budget"
    assert client.get("/api/v1/jobs", REMOTE_ADDR="203.0.113.9", **bearer()).status_code == 200


def test_answers_carry_the_rate_limit_headers(client, bearer, settings):
    settings.LEITSTAND_API_RATE_PER_MINUTE = 10
    reader = bearer()
    first, second = client.get("/api/v1/jobs", **reader), client.get("/api/v1/jobs", **reader)
    assert (first["RateLimit-Limit"], first["RateLimit-Remaining"], second["RateLimit-Remaining"]) == ("10", "9", "8")
    assert 1 <= int(second["RateLimit-Reset"]) <= 60


def test_the_rate_windows_hold_about_a_minute_of_rows(client, bearer, db_clock):
    from api.models import ApiAddressWindow, ApiRateWindow

    for n in range(3):
        client.get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Bearer lst_{n:012x}_x", REMOTE_ADDR=f"203.0.113.{n}")
    client.get("/api/v1/jobs", **bearer())
    assert (ApiAddressWindow.objects.count(), ApiRateWindow.objects.count()) == (3, 1)
    db_clock.advance(120)
    client.get("/api/v1/jobs", HTTP_AUTHORIZATION="Bearer lst_00000000000f_x", REMOTE_ADDR="203.0.113.99")
    client.get("/api/v1/jobs", **bearer())
    assert (ApiAddressWindow.objects.count(), ApiRateWindow.objects.count()) == (1, 1), "older minutes are gone"


def test_a_tokens_last_use_is_written_at_most_once_a_minute(client, bearer, db_clock):
    from api.models import ApiToken

    reader = bearer("jobs:read", name="reader")
    client.get("/api/v1/jobs", **reader)
    first = ApiToken.objects.get(name="reader").last_used_at
    db_clock.advance(30)
    client.get("/api/v1/jobs", **reader)
    assert first is not None and ApiToken.objects.get(name="reader").last_used_at == first, "not within the minute"
    db_clock.advance(31)
    client.get("/api/v1/jobs", **reader)
    assert ApiToken.objects.get(name="reader").last_used_at > first
