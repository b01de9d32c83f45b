"""POST /api/v1/jobs/{id}/hold and /resume: the PHP core holds its own job waiting in line and puts it
back; a job that does not wait (or is not held) is a 409, another client's a 404, a token without
jobs:write a 403, no reason a 422 — each changing nothing."""

import pytest

from jobs import leases
from jobs.models import Job, State
from tests.api.test_job_move import bearer, own_job, post  # noqa: F401 (own_job: a fixture)
from tests.conftest import job_in_state

pytestmark = pytest.mark.django_db


def test_the_php_core_holds_its_job_and_puts_it_back(client, own_job):  # noqa: F811
    job, headers = own_job
    held = post(client, f"/api/v1/jobs/{job.pk}/hold", {"reason": "the customer asked us to wait"}, headers)
    assert held.status_code == 200, held.text
    assert held.json()["state"] == "held"
    assert held.json()["transitions"][-1]["cause"] == "held: the customer asked us to wait"
    worker = leases.WorkerIdentity("test-host", 4242, "synthetic")
    assert leases.claim(pool="synthetic", worker=worker, lease_seconds=30) == []
    resumed = post(client, f"/api/v1/jobs/{job.pk}/resume", {"reason": "ready"}, headers)
    assert resumed.status_code == 200 and resumed.json()["state"] == "planned"
    assert [c.id for c in leases.claim(pool="synthetic", worker=worker, lease_seconds=30)] == [job.pk]


def test_holding_what_does_not_wait_is_a_409_and_changes_nothing(client, own_job):  # noqa: F811
    job, headers = own_job
    answer = post(client, f"/api/v1/jobs/{job.pk}/resume", {"reason": "r"}, headers)
    assert answer.status_code == 409 and "planned" in answer.text
    job_in_state(job, State.RUNNING)
    answer = post(client, f"/api/v1/jobs/{job.pk}/hold", {"reason": "r"}, headers)
    assert answer.status_code == 409 and "running" in answer.text
    assert Job.objects.get(pk=job.pk).state == State.RUNNING


@pytest.mark.parametrize("action", ["hold", "resume"])
def test_another_clients_job_a_read_token_and_no_reason_are_refused(client, own_job, action):  # noqa: F811
    job, headers = own_job
    path = f"/api/v1/jobs/{job.pk}/{action}"
    assert post(client, path, {"reason": "r"}, bearer("partner")).status_code == 404
    assert post(client, path, {"reason": "r"}, bearer(scopes=("jobs:read",))).status_code == 403
    for body in ({}, {"reason": ""}, {"reason": "x" * 401}, {"reason": "a\u0000b"}, {"reason": "a\nforged line"}):
        answer = post(client, path, body, headers)
        assert answer.status_code == 422 and "reason" in answer.text, answer.text
    assert Job.objects.get(pk=job.pk).state == State.PLANNED


def test_a_held_bulk_job_is_not_resumed_into_a_full_bulk_lane(client, settings, make_job):
    """Held jobs are not counted in the bulk lane's depth: resuming them is refused like a submission
    while the lane is full with the client's share (503), so holding and resuming cannot carry a client
    past it."""
    from api import backpressure

    headers = bearer()
    created = post(
        client, "/api/v1/jobs", {"type": "synthetic", "payload": {}, "idempotency_key": "bulk", "priority": 9}, headers
    )
    job_id = created.json()["id"]
    assert post(client, f"/api/v1/jobs/{job_id}/hold", {"reason": "later"}, headers).status_code == 200
    settings.LEITSTAND_API_BULK_LANE_DEPTH = 2
    backpressure.forget()
    owner = Job.objects.get(pk=job_id).client_id
    for _ in range(2):
        make_job("synthetic", pool="synthetic", payload={}, priority=9, client_id=owner)
    answer = post(client, f"/api/v1/jobs/{job_id}/resume", {"reason": "now"}, headers)
    assert answer.status_code == 503 and answer["Retry-After"], answer.text
    assert Job.objects.get(pk=job_id).state == State.HELD
    backpressure.forget()
