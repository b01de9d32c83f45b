"""POST /api/v1/jobs/{id}/move: the PHP core moves its own job waiting in line to another lane or due
time; a job that no longer waits is a 409, another client's a 404, bad input a 422 that changes nothing."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from api.tokens import token_create
from jobs import leases
from jobs.clients import client_lanes_set
from jobs.models import Job, State
from tests.conftest import job_in_state

pytestmark = pytest.mark.django_db


def bearer(client_name="php-core", scopes=("jobs:read", "jobs:write", "jobs:synthetic")):
    """A token of ``client_name``; the PHP core's client may use every lane (an operator granted it)."""
    created, clear = token_create(name=f"{client_name}-{uuid.uuid4().hex[:6]}", client=client_name, scopes=list(scopes))
    if client_name == "php-core":
        client_lanes_set(client_id=created.client_id, most_urgent_lane=0)
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def post(client, path, body, headers):
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def own_job(client):
    headers = bearer()
    created = post(client, "/api/v1/jobs", {"type": "synthetic", "payload": {}, "idempotency_key": "m-1"}, headers)
    assert created.status_code == 201
    return Job.objects.get(pk=created.json()["id"]), headers


def test_the_php_core_moves_its_waiting_job_to_the_front_or_later(client, own_job):
    job, headers = own_job
    ahead = [
        post(client, "/api/v1/jobs", {"type": "synthetic", "payload": {}, "idempotency_key": f"a-{n}"}, headers)
        for n in range(2)
    ]
    assert all(answer.status_code == 201 for answer in ahead)
    moved = post(client, f"/api/v1/jobs/{job.pk}/move", {"priority": 0, "reason": "the customer waits"}, headers)
    assert moved.status_code == 200 and moved.json()["priority"] == 0
    (first,) = leases.claim(
        pool="synthetic", worker=leases.WorkerIdentity("test-host", 4242, "synthetic"), lease_seconds=30
    )
    assert first.id == job.pk
    later = datetime.now(UTC) + timedelta(hours=3)
    other = Job.objects.get(pk=ahead[0].json()["id"])
    answer = post(client, f"/api/v1/jobs/{other.pk}/move", {"due_at": later.isoformat()}, headers)
    assert answer.status_code == 200 and Job.objects.get(pk=other.pk).due_at > datetime.now(UTC) + timedelta(hours=2)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "priority"),
        ({"priority": 10}, "priority"),
        ({"priority": "0"}, "priority"),
        ({"due_at": "1900-01-01T00:00:00Z"}, "due_at"),
        ({"priority": 1, "reason": ""}, "reason"),
        # Log forging (issue 54, item 2): a line break and a fake log line of its own.
        ({"priority": 1, "reason": "ok\n2026-12-07 05:00:00 INFO api job deleted by admin"}, "reason"),
        ({"priority": 1, "reason": "tab\there"}, "reason"),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_changes_nothing(client, own_job, body, field):
    job, headers = own_job
    answer = post(client, f"/api/v1/jobs/{job.pk}/move", body, headers)
    assert answer.status_code == 422 and field in answer.text, answer.text
    assert (Job.objects.get(pk=job.pk).priority, Job.objects.get(pk=job.pk).due_at) == (job.priority, job.due_at)


def test_a_job_that_no_longer_waits_is_a_409_and_another_client_s_a_404(client, own_job):
    job, headers = own_job
    assert post(client, f"/api/v1/jobs/{job.pk}/move", {"priority": 1}, bearer("partner")).status_code == 404
    assert (
        post(client, f"/api/v1/jobs/{job.pk}/move", {"priority": 1}, bearer(scopes=("jobs:read",))).status_code == 403
    )
    job_in_state(job, State.RUNNING)
    answer = post(client, f"/api/v1/jobs/{job.pk}/move", {"priority": 1}, headers)
    assert answer.status_code == 409 and "running" in answer.text
    assert Job.objects.get(pk=job.pk).priority == job.priority


def test_the_consoles_move_keeps_a_reason_to_one_printable_line(own_job):
    from jobs import services

    job, _ = own_job
    with pytest.raises(services.JobInputError) as refused:
        services.job_reorder(job_id=job.pk, actor="user:ops", reason="moved\r\nforged audit line", priority=1)
    assert refused.value.field == "reason" and Job.objects.get(pk=job.pk).priority == job.priority
