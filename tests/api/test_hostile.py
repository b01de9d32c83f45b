"""The API refuses, never crashes (issue 35): each test sends what a hostile or careless client sends
and shows a precise 4xx with the field named, nothing stored, and nothing of anyone else's touched."""

import json
import logging
import uuid

import pytest

from api.tokens import token_create
from jobs.insert import job_insert
from jobs.models import Job
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db

SCOPES = ["jobs:read", "jobs:write", "jobs:synthetic", "jobs:all"]


@pytest.fixture
def bearer():
    def make(*scopes):
        _, clear = token_create(name=uuid.uuid4().hex[:8], scopes=list(scopes or SCOPES))
        return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}

    return make


def submit(client, headers, **fields):
    body = {"type": "synthetic", "payload": {}, "idempotency_key": "k-1", **fields}
    return client.post("/api/v1/jobs", json.dumps(body), content_type="application/json", **headers)


def refused_field(answer) -> str:
    assert answer.status_code == 422, answer.content
    return answer.json()["invalid_fields"][0]["field"]


@pytest.mark.parametrize("priority", [True, "3", 3.0, "0"])
def test_an_integer_field_takes_integers_only(client, bearer, priority):
    assert refused_field(submit(client, bearer(), priority=priority)).endswith("priority")
    assert not Job.objects.exists()


@pytest.mark.parametrize("correlation", ["café-1", "bestellung-müller-4711", "a\tb", "line\nbreak"])
def test_a_correlation_id_must_be_able_to_travel_in_a_header(client, bearer, correlation):
    assert refused_field(submit(client, bearer(), correlation_id=correlation)).endswith("correlation_id")
    answer = client.post(
        "/api/v1/jobs",
        json.dumps({"type": "synthetic", "payload": {}, "idempotency_key": "k-2"}),
        content_type="application/json",
        HTTP_X_CORRELATION_ID=correlation.encode().decode("latin-1"),
        **bearer(),
    )
    assert answer.status_code == 422 and "correlation" in answer.content.decode().lower()
    assert not Job.objects.exists()


def test_a_due_time_in_the_past_is_refused(client, bearer):
    assert refused_field(submit(client, bearer(), due_at="1900-01-01T00:00:00Z")) == "due_at"
    assert submit(client, bearer(), idempotency_key="soon", due_at="2099-01-01T00:00:00Z").status_code == 201


@pytest.mark.parametrize("where", ["payload", "source", "idempotency_key"])
def test_a_lone_surrogate_is_a_422_not_a_500(client, bearer, where):
    raw = '{"type": "synthetic", "payload": {}, "idempotency_key": "k-1"}'
    raw = {
        "payload": raw.replace('"payload": {}', '"payload": {"steps": ["\\ud800"]}'),
        "source": raw.replace('"k-1"', '"k-1", "source": "\\udfff"'),
        "idempotency_key": raw.replace('"k-1"', '"k-\\ud800"'),
    }[where]
    answer = client.post("/api/v1/jobs", raw, content_type="application/json", **bearer())
    assert answer.status_code == 422, answer.content
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"pool": "notify", "duration_ms": 15000}, "pool"),
        ({"steps": [f"s{i}" for i in range(10_000)]}, "steps"),
        ({"fail": "transient", "retry_after_s": "soon"}, "retry_after_s"),
        ({"fail": "transient", "retry_after_s": 1e300}, "retry_after_s"),
        ({"pool": ["notify"]}, "pool"),
        ({"fail": ["transient"]}, "fail"),
    ],
)
def test_a_synthetic_job_cannot_starve_alerts_or_flood_step_rows(client, bearer, payload, field):
    answer = submit(client, bearer(), payload=payload)
    assert refused_field(answer) == "payload" and field in answer.json()["detail"]
    assert not Job.objects.exists()


def test_a_clients_synthetic_jobs_run_in_their_own_pool_and_cannot_choose_another(client, bearer):
    for pool in ("crawl", "analysis", "recheck"):
        answer = submit(client, bearer(), payload={"pool": pool, "duration_ms": 15000}, idempotency_key=pool)
        assert refused_field(answer) == "payload.pool" and "synthetic pool" in answer.json()["detail"]
    assert not Job.objects.exists()
    assert submit(client, bearer(), payload={"pool": "synthetic"}, idempotency_key="named").status_code == 201
    assert submit(client, bearer(), idempotency_key="default").status_code == 201
    assert set(Job.objects.values_list("pool", flat=True)) == {"synthetic"}
    # An operator's drill may still go through a real pool's workers.
    drill = job_submit(job_type="synthetic", payload={"pool": "crawl"}, idempotency_key="drill", actor="user:op").job
    assert drill.pool == "crawl"


@pytest.mark.parametrize("job_type", ["api_webhook", "alert_notify", "shadow"])
def test_the_systems_own_deliveries_are_outside_every_clients_view(client, bearer, job_type):
    job = job_insert(type=job_type, pool="notify", idempotency_key="internal", payload={}, actor="system").job
    everything = bearer("jobs:read", "jobs:write", "jobs:all")
    assert client.get(f"/api/v1/jobs/{job.pk}", **everything).status_code == 404
    listed = client.get("/api/v1/jobs", **everything).json()["items"]
    assert str(job.pk) not in {item["id"] for item in listed}
    cancel = client.post(
        f"/api/v1/jobs/{job.pk}/cancel",
        json.dumps({"reason": "silence"}),
        content_type="application/json",
        **everything,
    )
    assert cancel.status_code == 404
    assert Job.objects.get(pk=job.pk).state == "planned"


def test_a_credential_sent_with_another_scheme_is_never_logged(client, settings, caplog):
    settings.DEBUG = True
    with caplog.at_level(logging.DEBUG):
        answer = client.get("/api/v1/jobs", HTTP_AUTHORIZATION="Basic c2VjcmV0LXBhc3N3b3Jk")
    assert answer.status_code == 401
    assert "c2VjcmV0LXBhc3N3b3Jk" not in caplog.text


@pytest.mark.parametrize("due_at", [1893456000, "1893456000", 1893456000.5, "2030-01-01", True])
def test_a_moment_is_a_date_time_as_the_schema_says_never_a_number(client, bearer, due_at):
    """Issue 54, item 8: an integer due_at was taken as a Unix time, where the schema says date-time."""
    assert refused_field(submit(client, bearer(), due_at=due_at)).endswith("due_at")
    assert not Job.objects.exists()
    listed = client.get("/api/v1/jobs", {"updated_after": "1893456000"}, **bearer())
    assert refused_field(listed).endswith("updated_after")
    assert submit(client, bearer(), due_at="2030-01-01T00:00:00Z").status_code == 201


@pytest.mark.parametrize("limit", [0, -5, 101, 100_000])
def test_a_page_size_outside_the_schemas_bounds_is_refused_not_clamped(client, bearer, limit):
    """Issue 54, item 8: 0, -5 and 100,000 were clamped silently."""
    answer = client.get("/api/v1/pools/synthetic/keys", {"limit": limit}, **bearer())
    assert refused_field(answer) == "limit"
    assert client.get("/api/v1/jobs", {"limit": 501}, **bearer()).status_code == 422


def test_the_document_declares_the_headers_the_api_reads_and_answers(client, bearer):
    document = client.get("/api/v1/openapi.json").json()
    read = {"X-Correlation-ID", "traceparent", "tracestate"}
    answered = {"X-Correlation-ID", "traceresponse", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
    keys = document["paths"]["/api/v1/pools/{pool}/keys"]["get"]
    assert keys["parameters"][-1]["$ref"].endswith("tracestate")
    assert {p["name"] for p in keys["parameters"] if p.get("in") == "query"} >= {"limit", "after"}
    (limit,) = [p for p in keys["parameters"] if p.get("name") == "limit"]
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 100)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            refs = {p["$ref"].rsplit("/", 1)[1] for p in operation["parameters"] if "$ref" in p}
            assert refs == read, f"{method} {path}"
            for status, answer in operation["responses"].items():
                assert set(answer["headers"]) >= answered, f"{method} {path} {status}"
    # and the API answers them
    answer = client.get("/api/v1/jobs", HTTP_X_CORRELATION_ID="c-1", **bearer())
    assert {answer["X-Correlation-ID"], answer["RateLimit-Limit"].isdigit()} == {"c-1", True}
