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
    for body in ({}, {"reason": ""}, {"reason": "x" * 401}, {"reason": "a\u0000b"}):
        answer = post(client, path, body, headers)
        assert answer.status_code == 422 and "reason" in answer.text, answer.text
    assert Job.objects.get(pk=job.pk).state == State.PLANNED
