"""Backpressure (api/backpressure.py): a submission to a pool's bulk lane while that lane holds
LEITSTAND_API_BULK_LANE_DEPTH planned jobs is answered 503 with Retry-After and creates nothing; the
other lanes still pass, a repeat of what exists is answered as always, and the PHP client waits for
Retry-After and submits again."""

import json
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from api import backpressure
from api.tokens import token_create
from jobs import leases
from jobs.clients import client_lanes_set
from jobs.models import Batch, Client, Job

pytestmark = pytest.mark.django_db(transaction=True)
PHP_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "php"


@pytest.fixture
def token():
    """The PHP core's token; its client may use every lane (an operator granted it)."""
    created, clear = token_create(
        name=f"php-{uuid.uuid4().hex[:6]}", client="php-core", scopes=["jobs:read", "jobs:write", "jobs:synthetic"]
    )
    client_lanes_set(client_id=created.client_id, most_urgent_lane=0)
    return clear


@pytest.fixture
def full_lane(settings, make_job, token):
    """The synthetic pool's bulk lane at its bound of 3 planned jobs, all the PHP core's."""
    settings.LEITSTAND_API_BULK_LANE_DEPTH = 3
    settings.LEITSTAND_API_BULK_RETRY_AFTER_SECONDS = 1
    backpressure.forget()
    core = Client.objects.get(name="php-core")
    blockers = [make_job("synthetic", pool="synthetic", payload={}, priority=9, client_id=core.pk) for _ in range(3)]
    yield blockers
    backpressure.forget()


def move(client, token, job_id, priority):
    body = {"priority": priority, "reason": "moved by a test"}
    return client.post(
        f"/api/v1/jobs/{job_id}/move",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def submit(client, token, key, priority=None, path="/api/v1/jobs", body=None):
    body = body or {"type": "synthetic", "payload": {}, "idempotency_key": key, "priority": priority}
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_full_bulk_lane_refuses_bulk_submissions_with_503_and_lets_urgent_ones_pass(client, full_lane, token):
    before = Job.objects.count()
    counted = backpressure.REFUSED.labels("synthetic", "bulk_lane_full")._value.get()
    refused = submit(client, token, "bulk-1", priority=9)
    assert backpressure.REFUSED.labels("synthetic", "bulk_lane_full")._value.get() == counted + 1
    assert refused.status_code == 503 and refused["Retry-After"] == "1"
    assert (
        refused.json()["type"] == "/problems/bulk-lane-full"
        and "synthetic pool's bulk lane" in refused.json()["detail"]
    )
    assert Job.objects.count() == before, "nothing created"
    assert submit(client, token, "urgent-1", priority=0).status_code == 201
    assert submit(client, token, "default-1").status_code == 201, "the type's default lane is not the bulk lane"

    batch = {
        "key": "nightly",
        "name": "nightly",
        "jobs": [
            {"type": "synthetic", "payload": {}, "idempotency_key": "n-1", "priority": 5},
            {"type": "synthetic", "payload": {}, "idempotency_key": "n-2", "priority": 9},
        ],
    }
    refused = submit(client, token, None, path="/api/v1/batches", body=batch)
    assert refused.status_code == 503 and not Batch.objects.exists()
    assert not Job.objects.filter(idempotency_key__in=["n-1", "n-2"]).exists(), "a batch is refused whole"


def test_a_repeat_of_what_exists_is_answered_even_while_the_lane_is_full(client, settings, make_job, token):
    settings.LEITSTAND_API_BULK_LANE_DEPTH = 1
    backpressure.forget()
    first = submit(client, token, "bulk-once", priority=9)
    assert first.status_code == 201
    backpressure.forget()
    again = submit(client, token, "bulk-once", priority=9)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert submit(client, token, "bulk-other", priority=9).status_code == 503


def test_below_the_bound_or_without_one_bulk_submissions_pass(client, full_lane, settings, token):
    leases.reorder(full_lane[0].pk, priority=5)  # the lane holds two: below its bound
    backpressure.forget()
    assert submit(client, token, "bulk-2", priority=9).status_code == 201
    settings.LEITSTAND_API_BULK_LANE_DEPTH = 0  # no bound
    backpressure.forget()
    assert submit(client, token, "bulk-3", priority=9).status_code == 201


def test_the_php_client_waits_for_retry_after_and_submits_again(live_server, full_lane, token):
    """The lane is full when the PHP client submits; a second later an operator moves a job out of it.
    The client waits the 503's Retry-After and its next try is created."""
    result = php_submits_while(lambda: leases.reorder(full_lane[0].pk, priority=5), live_server, token, "php-bulk-1", 9)
    assert Job.objects.get(pk=result["id"]).priority == 9


@pytest.fixture
def bound_of_three(settings):
    """Every client may have 3 open jobs."""
    settings.LEITSTAND_API_CLIENT_OPEN_JOBS = 3
    settings.LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS = 1
    backpressure.forget()
    yield
    backpressure.forget()


def test_a_client_at_its_bound_of_open_jobs_gets_429_and_others_go_on(client, bound_of_three, token):
    for n in range(3):
        assert submit(client, token, f"open-{n}").status_code == 201
    backpressure.forget()
    before = Job.objects.count()
    refused = submit(client, token, "open-3")
    assert refused.status_code == 429 and refused["Retry-After"] == "1"
    assert refused["RateLimit-Limit"] and refused["RateLimit-Remaining"], "the token's budget, as on every answer"
    assert (
        refused.json()["type"] == "/problems/too-many-open-jobs" and "3 or more open jobs" in refused.json()["detail"]
    )
    assert Job.objects.count() == before, "nothing created"
    assert submit(client, token, "open-0").status_code == 200, "a repeat of what exists is answered"
    batch = {"key": "b", "name": "b", "jobs": [{"type": "synthetic", "payload": {}, "idempotency_key": "b-1"}]}
    assert submit(client, token, None, path="/api/v1/batches", body=batch).status_code == 429
    assert not Batch.objects.exists()

    _, other = token_create(name="other", client="partner", scopes=["jobs:write", "jobs:synthetic"])
    assert submit(client, other, "partner-1").status_code == 201, "another client's bound is its own"

    from jobs.models import Client

    Client.objects.filter(name="php-core").update(max_open_jobs=10)  # its own bound, above the default
    backpressure.forget()
    assert submit(client, token, "open-3").status_code == 201


def test_refusals_repeated_by_one_client_raise_its_alert_and_no_one_elses(client, full_lane, settings, token, db_clock):
    """A client that keeps submitting into 429s and 503s (not waiting out Retry-After) raises
    api_submissions_refused with its reasons; a client refused once, as flow control, raises nothing."""
    from alerts import alert_rules, evaluation
    from alerts.models import Alert

    settings.LEITSTAND_ALERTS = {
        **settings.LEITSTAND_ALERTS,
        "api_submissions_refused": {
            **settings.LEITSTAND_ALERTS["api_submissions_refused"],
            "count": 5,
            "clear_seconds": 0,
        },
    }
    settings.LEITSTAND_API_CLIENT_OPEN_JOBS = 6
    _, patient = token_create(name="patient", client="partner", scopes=["jobs:write", "jobs:synthetic"])
    assert submit(client, patient, "p-1", priority=9).status_code == 201, "the full lane is php-core's, not its"
    for n in range(4):
        assert submit(client, token, f"loop-{n}", priority=9).status_code == 503
    backpressure.forget()  # php-core's 6 open jobs: the lane's 3 and 3 urgent ones
    for n in range(3):
        assert submit(client, token, f"urgent-{n}", priority=0).status_code == 201
    backpressure.forget()
    for n in range(2):
        assert submit(client, token, f"over-{n}", priority=0).status_code == 429
    alert_rules.rule_memory.clear()
    evaluation.alerts_evaluate(now=db_clock.now())
    (alert,) = Alert.objects.filter(rule="api_submissions_refused").exclude(state="resolved")
    assert alert.scope == "client:php-core" and alert.value == 6, "the partner's one bulk job was no refusal"
    assert alert.diagnosis == (
        "client php-core: 6 submissions refused in the last 10 min — 4 × 503 for pool synthetic's full bulk "
        "lane; 2 × 429 at its bound of open jobs (pool synthetic): it does not wait out Retry-After, or its "
        "pool cannot keep up"
    )
    db_clock.advance(seconds=11 * 60)  # the refusals fall out of the window: the alert resolves
    evaluation.alerts_evaluate(now=db_clock.now())
    assert not Alert.objects.filter(rule="api_submissions_refused").exclude(state="resolved").exists()


def test_the_bound_counts_open_jobs_only(client, bound_of_three, token):
    ids = [submit(client, token, f"ended-{n}").json()["id"] for n in range(3)]
    for job_id in ids:
        client.post(
            f"/api/v1/jobs/{job_id}/cancel", "{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
        )
    backpressure.forget()
    assert submit(client, token, "after-ended").status_code == 201, "cancelled jobs are not open"


def test_the_php_client_waits_for_a_429s_retry_after_and_submits_again(live_server, bound_of_three, token):
    """The client is at its bound when the PHP client submits; half a second later one of its jobs is
    cancelled. The client waits the 429's Retry-After and its next try is created."""
    from jobs.services import job_cancel

    jobs = [submit_as(live_server, token, f"php-open-{n}") for n in range(3)]
    backpressure.forget()  # counted afresh: the bound is soft by a second's submissions
    php_submits_while(
        lambda: job_cancel(job_id=jobs[0], actor="test", reason="done with it"), live_server, token, "php-open-3"
    )


def php_submits_while(free, live_server, token, key, priority=None) -> dict:
    """The PHP client submits ``key`` while it would be refused; half a second in, ``free()`` makes room.
    It waits the answer's Retry-After (1 s) and its next try is created: what it says of its tries."""
    options = f", ['priority' => {priority}]" if priority is not None else ""
    script = f"""
        require '{PHP_CLIENT}/autoload.php';
        $client = new Leitstand\\Client('{live_server.url}', '{token}', ['backoff_seconds' => 0.1]);
        $started = microtime(true);
        $job = $client->submitJob('synthetic', [], '{key}'{options});
        echo json_encode(['id' => $job['id'], 'created' => $job['created'], 'attempts' => $client->lastAttempts,
                          'seconds' => microtime(true) - $started]);
    """
    freed = threading.Timer(0.5, free)
    freed.start()
    ran = subprocess.run(["php", "-r", script], capture_output=True, text=True, timeout=60)
    freed.join()
    assert ran.returncode == 0, ran.stderr + ran.stdout
    result = json.loads(ran.stdout)
    assert result["created"] is True and result["attempts"] >= 2, result
    assert result["seconds"] >= 1.0, "it waited the Retry-After (1 s), not its own 0.1 s backoff"
    return result


def submit_as(live_server, token, key) -> str:
    from django.test import Client as TestClient

    answer = submit(TestClient(), token, key)
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def test_a_move_into_a_full_bulk_lane_is_refused_like_a_submission(client, full_lane, token):
    """Issue 54, item 3: submit in lane 5, move to 9 passed the bound with the lane full."""
    created = submit(client, token, "urgent-1", priority=5)
    assert created.status_code == 201
    job_id = created.json()["id"]
    moved = client.post(
        f"/api/v1/jobs/{job_id}/move",
        json.dumps({"priority": 9, "reason": "later"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert moved.status_code == 503 and moved.json()["type"] == "/problems/bulk-lane-full"
    assert Job.objects.get(pk=job_id).priority == 5


def test_one_clients_bulk_flood_refuses_its_own_submissions_not_anothers(client, settings, token):
    """Attack (issue 54, item 3): one client's bulk jobs filled the lane for every client, and moving
    a job into lane 9 passed the bound. Each client has its share: the bound among the clients with
    bulk work in the lane, itself included."""
    settings.LEITSTAND_API_BULK_LANE_DEPTH = 4
    for n in range(4):
        backpressure.forget()
        assert submit(client, token, f"flood-{n}", priority=9).status_code == 201
    backpressure.forget()
    assert submit(client, token, "flood-4", priority=9).status_code == 503, "the flood's own client"
    _, partner = token_create(name="partner", client="partner", scopes=["jobs:write", "jobs:synthetic"])
    for n in range(2):  # its share of a lane two clients use: 4 // 2
        backpressure.forget()
        assert submit(client, partner, f"partner-{n}", priority=9).status_code == 201
    backpressure.forget()
    assert submit(client, partner, "partner-2", priority=9).status_code == 503, "at its share"
    waiting = submit(client, partner, "partner-5", priority=5)
    backpressure.forget()
    moved = move(client, partner, waiting.json()["id"], 9)
    assert moved.status_code == 503 and Job.objects.get(pk=waiting.json()["id"]).priority == 5


def test_a_client_may_not_buy_the_pool_with_a_lane_it_was_not_granted(client, settings):
    """Attack (issue 54, item 5): client A's lane-0 jobs held client B's lane-5 job for their whole
    run. A new client's most urgent lane is 5; more is an operator's grant."""
    _, partner = token_create(name="partner", client="partner", scopes=["jobs:write", "jobs:synthetic"])
    for priority in (0, 4):
        refused = submit(client, partner, f"urgent-{priority}", priority=priority)
        assert refused.status_code == 422 and refused.json()["invalid_fields"][0]["field"].endswith("priority")
        assert "lanes 5 to 9" in refused.json()["invalid_fields"][0]["message"]
    batch = {
        "key": "b",
        "name": "b",
        "jobs": [{"type": "synthetic", "payload": {}, "idempotency_key": "b-1", "priority": 0}],
    }
    refused = submit(client, partner, None, path="/api/v1/batches", body=batch)
    assert refused.status_code == 422 and refused.json()["invalid_fields"][0]["field"].endswith("jobs[0].priority")
    waiting = submit(client, partner, "normal", priority=5)
    assert waiting.status_code == 201 and submit(client, partner, "default").status_code == 201
    moved = move(client, partner, waiting.json()["id"], 0)
    assert moved.status_code == 422 and Job.objects.get(pk=waiting.json()["id"]).priority == 5
    assert not Job.objects.filter(priority__lt=5).exists()
    client_lanes_set(client_id=Client.objects.get(name="partner").pk, most_urgent_lane=2)
    assert submit(client, partner, "granted", priority=2).status_code == 201
