"""REST API v1: tokens and scopes, idempotent submission, the job record, problem+json for every
kind of bad input, the body limit, and correlation IDs."""

import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from api.models import ApiToken
from api.tokens import token_create, token_revoke
from jobs.models import Job
from rechecks.policy import Kind

pytestmark = pytest.mark.django_db


@pytest.fixture
def bearer():
    def make(*scopes, name=None):
        _, clear = token_create(name=name or uuid.uuid4().hex[:8], client="php-core", scopes=list(scopes))
        return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}

    return make


def post(client, body, headers, **extra):
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/api/v1/jobs", raw, content_type="application/json", **headers, **extra)


def job_body(**fields):
    return {"type": "synthetic", "payload": {"steps": ["a"]}, "idempotency_key": "order-1", **fields}


def test_a_token_is_shown_once_and_stored_only_as_a_hash(capsys):
    call_command("create_api_token", "--name", "php-core", "--scopes", "jobs:read,jobs:write")
    clear = capsys.readouterr().out.strip()
    token = ApiToken.objects.get(name="php-core")
    assert clear.startswith(f"lst_{token.prefix}_") and clear.split("_", 2)[2] not in token.secret_hash
    assert token.scopes == ["jobs:read", "jobs:write"]
    with pytest.raises(CommandError, match="unknown or missing scopes \\['jobs:everything'\\]"):
        call_command("create_api_token", "--name", "x", "--scopes", "jobs:everything")


def test_missing_revoked_and_unscoped_tokens(client, bearer):
    assert client.get(f"/api/v1/jobs/{uuid.uuid4()}").status_code == 401
    reader = bearer("jobs:read", name="reader")
    assert post(client, job_body(), reader).status_code == 403
    response = client.get(f"/api/v1/jobs/{uuid.uuid4()}", **reader)
    assert response.status_code == 404 and response["Content-Type"] == "application/problem+json"
    token_revoke(name="reader")
    response = client.get(f"/api/v1/jobs/{uuid.uuid4()}", **reader)
    assert response.status_code == 401 and response.json()["title"] == "Unauthorized"


def test_submission_is_idempotent_and_the_record_is_complete(client, bearer):
    writer = bearer("jobs:read", "jobs:write", "jobs:synthetic")
    first = post(client, job_body(), writer, HTTP_X_CORRELATION_ID="case-77")
    assert first.status_code == 201 and first["X-Correlation-ID"] == "case-77"
    job = first.json()
    assert (job["state"], job["correlation_id"], job["attempt"], job["type"]) == ("planned", "case-77", 0, "synthetic")
    assert [t["to_state"] for t in job["transitions"]] == ["planned"]
    again = post(client, job_body(), writer)
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    conflict = post(client, job_body(payload={"steps": ["b"]}), writer)
    assert conflict.status_code == 422 and conflict.json()["invalid_fields"][0]["field"] == "idempotency_key"
    assert Job.objects.count() == 1
    got = client.get(f"/api/v1/jobs/{job['id']}", **writer).json()
    assert got["id"] == job["id"] and got["max_attempts"] == 5
    generated = post(client, job_body(idempotency_key="order-2"), writer)
    assert generated.json()["correlation_id"] == generated["X-Correlation-ID"] != ""


@pytest.mark.parametrize(
    "body,status,field",
    [
        (b"{not json", 400, "parse"),
        ({"type": "synthetic", "idempotency_key": "k"}, 422, "payload"),
        ({"type": "nope", "payload": {}, "idempotency_key": "k"}, 422, "type"),
        ({"type": "synthetic", "payload": {}, "idempotency_key": "k", "priority": 12}, 422, "priority"),
        ({"type": "crawl", "payload": {}, "idempotency_key": "k", "due_at": "tomorrow"}, 422, "due_at"),
        (
            {"type": "crawl", "payload": {}, "idempotency_key": "k", "due_at": "0001-01-01T00:00:00+05:00"},
            422,
            "due_at",
        ),
        ({"type": "synthetic", "payload": {}, "idempotency_key": "k\u0000"}, 422, "idempotency_key"),
        ({"type": "synthetic", "payload": {}, "idempotency_key": "k", "source": "\u0000"}, 422, "source"),
        ({"type": "synthetic", "payload": {"a": "\u0000"}, "idempotency_key": "k"}, 422, "payload"),
        ({"type": "crawl", "payload": {"url": "https://site.example/"}, "idempotency_key": "k"}, 422, "payload"),
        ({"type": "synthetic", "payload": {"fail": "sometimes"}, "idempotency_key": "k"}, 422, "payload"),
    ],
)
def test_bad_input_gets_a_precise_problem_and_nothing_is_stored(client, bearer, body, status, field):
    # A payload the type's handler would refuse is refused at submission, with the handler's reason.
    response = post(client, body, bearer("jobs:write", "jobs:all", "jobs:synthetic"))
    assert response.status_code == status and response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert {"type", "title", "status", "detail"} <= set(problem) and problem["status"] == status
    assert field in [f["field"] for f in problem.get("invalid_fields", [])] or field in problem["detail"], problem
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "query,field",
    [
        ("correlation_id=%00", "correlation_id"),
        ("type=a%00", "type"),
        ("cursor=%00", "cursor"),
        ("updated_after=0001-01-01T00:00:00%2B05:00", "updated_after"),
        ("state=dreaming", "state"),
    ],
)
def test_bad_filters_get_a_precise_problem(client, bearer, query, field):
    response = client.get(f"/api/v1/jobs?{query}", **bearer("jobs:read"))
    assert response.status_code == 422 and response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert field in [f["field"] for f in problem.get("invalid_fields", [])] or field in problem["detail"], problem


def test_a_body_over_the_limit_is_refused_with_413(client, bearer, settings):
    settings.LEITSTAND_API_MAX_BODY_BYTES = 2048
    response = post(client, job_body(payload={"blob": "x" * 5000}), bearer("jobs:write", "jobs:synthetic"))
    assert response.status_code == 413 and response.json()["title"] == "Payload Too Large"
    assert not Job.objects.exists()


def test_the_schema_is_published(client):
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/jobs" in schema["paths"] and "/api/v1/jobs/{job_id}" in schema["paths"]


def test_listing_pages_by_cursor_without_gaps(client, bearer):
    writer = bearer("jobs:read", "jobs:write", "jobs:synthetic")
    ids = [
        post(client, job_body(idempotency_key=f"k{n}"), writer, HTTP_X_CORRELATION_ID="batch-9").json()["id"]
        for n in range(5)
    ]
    seen, cursor = [], None
    while True:
        page = client.get(
            "/api/v1/jobs",
            {"correlation_id": "batch-9", "limit": 2, **({"cursor": cursor} if cursor else {})},
            **writer,
        ).json()
        seen += [job["id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    bad = client.get("/api/v1/jobs", {"cursor": "garbage"}, **writer)
    assert bad.status_code == 400 and bad["Content-Type"] == "application/problem+json"
    assert client.get("/api/v1/jobs", {"state": "sleeping"}, **writer).status_code == 422


def test_listing_pages_through_jobs_that_changed_at_the_same_moment(client, bearer, make_job):
    """The keyset is (state_changed_at, id): ties on the moment are ordered by ID, none skipped."""
    reader = bearer("jobs:read", "jobs:all")
    jobs = [make_job(correlation_id="ties") for _ in range(9)]
    moment = timezone.now()
    Job.objects.filter(pk__in=[j.pk for j in jobs[:2]]).update(state_changed_at=moment - timedelta(seconds=1))
    Job.objects.filter(pk__in=[j.pk for j in jobs[2:8]]).update(state_changed_at=moment)
    Job.objects.filter(pk=jobs[8].pk).update(state_changed_at=moment + timedelta(seconds=1))
    expected = (
        [str(j.pk) for j in sorted(jobs[:2], key=lambda j: j.pk)]
        + [str(j.pk) for j in sorted(jobs[2:8], key=lambda j: j.pk)]
        + [str(jobs[8].pk)]
    )
    seen, cursor = [], None
    while True:
        page = client.get(
            "/api/v1/jobs", {"correlation_id": "ties", "limit": 2, **({"cursor": cursor} if cursor else {})}, **reader
        ).json()
        seen += [job["id"] for job in page["items"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert seen == expected


def test_cancel_answers_409_once_the_job_ended(client, bearer):
    writer = bearer("jobs:read", "jobs:write", "jobs:synthetic")
    job = post(client, job_body(), writer).json()
    url = f"/api/v1/jobs/{job['id']}/cancel"
    done = client.post(url, json.dumps({"reason": "order withdrawn"}), content_type="application/json", **writer)
    assert done.status_code == 200 and (done.json()["state"], done.json()["completion_reason"]) == (
        "cancelled",
        "order withdrawn",
    )
    again = client.post(url, content_type="application/json", **writer)
    assert again.status_code == 409 and "already ended" in again.json()["detail"]


def test_the_docs_load_their_assets_from_this_server(client):
    page = client.get("/api/v1/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page and "cdn" not in page.lower()


def test_a_match_shows_its_finding_and_recheck_plan_and_a_decision_ends_the_plan(client, bearer):
    from rechecks.services import plan_request
    from tests.console.test_console import review_case

    case = review_case("api")
    plan = plan_request(job=case, finding=case.findings.get(), content_hash="h")
    reader = bearer("jobs:read", "jobs:all")
    record = client.get(f"/api/v1/jobs/{case.id}", **reader).json()
    assert record["findings"][0]["verdict"] == "unclear" and record["findings"][0]["asset_owner_ref"] == "RH-1001"
    assert record["recheck_plan"]["id"] == plan.id and record["recheck_plan"]["state"] == "active"
    assert client.get(f"/api/v1/rechecks/{plan.id}", **reader).json()["next_check_reason"].startswith("first check")
    assert client.get(f"/api/v1/rechecks/{plan.id}", **reader).json() == record["recheck_plan"], "read with the job"
    url = f"/api/v1/rechecks/{plan.id}/decision"
    body = json.dumps({"reason": "taken down, confirmed by the host"})
    assert client.post(url, body, content_type="application/json", **reader).status_code == 403
    reviewer = bearer("jobs:read", "jobs:all", "reviews:write")
    ended = client.post(url, body, content_type="application/json", **reviewer)
    assert ended.status_code == 200 and ended.json()["end_reason"] == "manual_decision"
    assert ended.json()["ended_by"].startswith("api:"), "the token's name is the actor"
    assert ended.json()["end_note"].endswith(": taken down, confirmed by the host")
    assert client.post(url, body, content_type="application/json", **reviewer).status_code == 409
    assert client.get("/api/v1/rechecks/999999", **reader).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_posts_with_one_key_make_one_job(bearer):
    import threading

    from django.db import connection
    from django.test import Client

    headers = bearer("jobs:write", "jobs:synthetic")
    statuses, ids, barrier = [], [], threading.Barrier(20)

    def submit():
        try:
            barrier.wait(timeout=10)
            response = post(Client(), job_body(idempotency_key="same-key"), headers)
            statuses.append(response.status_code)
            ids.append(response.json()["id"])
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [200] * 19 + [201], "exactly one request created the job"
    assert len(set(ids)) == 1 and Job.objects.count() == 1


def test_a_token_over_its_rate_gets_429_with_retry_after(client, bearer, settings):
    settings.LEITSTAND_API_RATE_PER_MINUTE = 3
    reader, other = bearer("jobs:read"), bearer("jobs:read")
    url = f"/api/v1/jobs/{uuid.uuid4()}"
    assert [client.get(url, **reader).status_code for _ in range(3)] == [404, 404, 404]
    limited = client.get(url, **reader)
    assert limited.status_code == 429 and limited["Content-Type"] == "application/problem+json"
    assert 1 <= int(limited["Retry-After"]) <= 60
    assert client.get(url, **other).status_code == 404, "each token has its own budget"


def batch_body(**fields):
    return {
        "key": "import-7",
        "name": "nightly import",
        "jobs": [
            {"type": "synthetic", "payload": {"steps": ["a"]}, "idempotency_key": f"import-7-{n}"} for n in range(3)
        ],
        **fields,
    }


def test_a_batch_is_submitted_once_per_key_and_reports_its_counters(client, bearer):
    writer = bearer("jobs:read", "jobs:write", "jobs:synthetic")
    url = "/api/v1/batches"
    first = client.post(url, json.dumps(batch_body()), content_type="application/json", **writer)
    assert first.status_code == 201, first.content
    batch = first.json()
    assert (batch["state"], batch["counters"]["total"], len(batch["job_ids"])) == ("running", 3, 3)
    assert {job.batch_id for job in Job.objects.all()} == {batch["id"]}
    again = client.post(url, json.dumps(batch_body()), content_type="application/json", **writer)
    assert (
        again.status_code == 200 and again.json()["id"] == batch["id"] and again.json()["job_ids"] == batch["job_ids"]
    )
    other = client.post(url, json.dumps(batch_body(name="another")), content_type="application/json", **writer)
    assert other.status_code == 422 and other.json()["invalid_fields"][0]["field"] == "key"
    assert Job.objects.count() == 3
    got = client.get(f"/api/v1/batches/{batch['id']}", **writer).json()
    assert got["counters"] == {
        "total": 3,
        "done": 0,
        "failed": 0,
        "dead": 0,
        "in_review": 0,
        "rechecking": 0,
        "cancelled": 0,
    }
    assert client.get("/api/v1/batches/999999", **writer).status_code == 404


def test_a_batch_with_a_bad_job_creates_nothing(client, bearer):
    writer = bearer("jobs:read", "jobs:write", "jobs:synthetic")
    body = batch_body(key="import-8")
    body["jobs"][2]["type"] = "nope"
    response = client.post("/api/v1/batches", json.dumps(body), content_type="application/json", **writer)
    assert response.status_code == 422 and response.json()["invalid_fields"][0]["field"] == "jobs[2].type"
    assert not Job.objects.exists()
    from jobs.models import Batch

    assert not Batch.objects.exists(), "the batch and its first two jobs were rolled back"
    empty = client.post(
        "/api/v1/batches", json.dumps(batch_body(key="x", jobs=[])), content_type="application/json", **writer
    )
    assert empty.status_code == 422 and empty.json()["invalid_fields"][0]["field"] == "jobs"


def test_jobs_are_listed_by_what_they_are_about(client, bearer, make_job):
    """A crawl job's subject is its URL (declared by the type, stored at submission): the PHP core
    finds every job of a site by the URL's prefix."""
    reader = bearer("jobs:read", "jobs:all")
    for path in ("a.example/x", "a.example/y", "b.example/z"):
        make_job("crawl", pool="crawl", payload={"source_id": 1, "url": f"https://{path}", "depth": 0, "run": "r"})
    found = client.get("/api/v1/jobs", {"subject": "https://a.example/"}, **reader).json()["items"]
    assert sorted(job["subject"] for job in found) == ["https://a.example/x", "https://a.example/y"]
    assert client.get("/api/v1/jobs", {"subject": "https://c.example/"}, **reader).json()["items"] == []


def test_a_batch_is_one_statement_with_every_guarantee_of_single_submissions(client, bearer):
    """The members are inserted in one statement (issue 22): each still gets its creation transition,
    its subject and the batch's counters; a key twice in one request is one job when the requests are
    equal and refused when not; a key that names a job outside this batch is refused; a bad payload
    names its job; nothing is created when anything is refused."""
    from jobs.models import Batch, BatchCounter, Transition

    writer = bearer("jobs:read", "jobs:write", "jobs:all")
    url = "/api/v1/batches"

    def crawl(n, key=None, url_=None):
        page = url_ or f"https://shop.example/p/{n}"
        return {
            "type": "crawl",
            "payload": {"source_id": 1, "url": page, "depth": 0, "run": "r"},
            "idempotency_key": key or f"k-{n}",
        }

    body = {"key": "b1", "name": "import", "jobs": [crawl(0), crawl(1), crawl(0)]}
    answer = client.post(url, json.dumps(body), content_type="application/json", **writer)
    assert answer.status_code == 201, answer.content
    ids = answer.json()["job_ids"]
    assert len(ids) == 3 and ids[0] == ids[2] != ids[1], "the same key and request twice: one job"
    assert Job.objects.count() == 2 and answer.json()["counters"]["total"] == 2
    assert sorted(Job.objects.values_list("subject", flat=True)) == [
        "https://shop.example/p/0",
        "https://shop.example/p/1",
    ]
    assert Transition.objects.filter(cause="created").count() == 2
    assert sum(BatchCounter.objects.values_list("total", flat=True)) == 2

    twice = {"key": "b2", "name": "import", "jobs": [crawl(5), crawl(6, key="k-5", url_="https://shop.example/other")]}
    refused = client.post(url, json.dumps(twice), content_type="application/json", **writer)
    assert refused.status_code == 422 and refused.json()["invalid_fields"][0]["field"] == "idempotency_key"
    other_batch = {"key": "b3", "name": "import", "jobs": [crawl(7), crawl(1)]}
    refused = client.post(url, json.dumps(other_batch), content_type="application/json", **writer)
    assert refused.status_code == 422 and refused.json()["invalid_fields"][0]["field"] == "jobs[1].idempotency_key"
    bad = {"key": "b4", "name": "import", "jobs": [crawl(8), {**crawl(9), "payload": {"url": "x"}}]}
    refused = client.post(url, json.dumps(bad), content_type="application/json", **writer)
    assert refused.status_code == 422 and refused.json()["invalid_fields"][0]["field"] == "jobs[1].payload"
    assert Job.objects.count() == 2 and Batch.objects.count() == 1, "every refusal rolled everything back"


def test_a_job_is_read_with_its_transitions_findings_and_plan_in_one_statement(client, bearer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rechecks.services import plan_request
    from tests.console.test_console import review_case

    case = review_case("api")
    plan = plan_request(job=case, finding=case.findings.get(), content_hash="h")
    for sequence in (2, 1):
        plan.observations.create(sequence=sequence, http_status=200, kind=Kind.UNCHANGED, decision="keep")
    reader = bearer("jobs:read", "jobs:all")
    client.get("/api/v1/jobs?limit=1", **reader)  # the minute's first request also tidies older windows
    with CaptureQueriesContext(connection) as queries:
        record = client.get(f"/api/v1/jobs/{case.id}", **reader).json()
    assert len(queries) == 2, [q["sql"][:80] for q in queries]  # the token with its counts, the job
    transitions = list(case.transitions.order_by("id").values_list("to_state", flat=True))
    assert [t["to_state"] for t in record["transitions"]] == transitions
    assert record["findings"][0]["image_url"] == case.findings.get().candidate.image_url
    assert [o["sequence"] for o in record["recheck_plan"]["observations"]] == [1, 2]
    assert client.get(f"/api/v1/rechecks/{plan.id}", **reader).json() == record["recheck_plan"]
