"""One job, two records (issue 55): the API's read and the export (``export_job``, the job page's
*Export JSON*, every line of an archive) are assembled apart; for one job with attempts, transitions
and a finding they must say the same — every field both carry, to the millisecond the API writes
(Django's JSON encoder; the export keeps PostgreSQL's microseconds)."""

import json
import uuid
from datetime import datetime

import pytest

from api.tokens import token_create
from history.export import export_json, job_export
from jobs.models import Job
from tests.console.test_console import review_case

pytestmark = pytest.mark.django_db


def _moment(value):
    """A JSON moment as a datetime to the millisecond (each record writes its own ISO form), anything
    else as it is."""
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    return value


def _same(left: dict, right: dict, fields) -> dict:
    return {name: (left[name], right[name]) for name in fields if _moment(left[name]) != _moment(right[name])}


def test_the_api_and_the_export_say_the_same_of_one_job(client):
    job = review_case(key=f"agree-{uuid.uuid4().hex[:6]}")
    _, secret = token_create(name="core", scopes=["jobs:read", "jobs:all"])
    api = client.get(f"/api/v1/jobs/{job.pk}", HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    exported = json.loads(export_json(job_export(Job.objects.get(pk=job.pk))))

    shared = [name for name in api if name in exported["job"]]
    assert len(shared) >= 20, shared
    assert _same(api, exported["job"], shared) == {}
    assert len(api["transitions"]) == len(exported["transitions"]) >= 1
    for read, kept in zip(api["transitions"], exported["transitions"]):
        assert _same(read, kept, ["from_state", "to_state", "at", "lease_version", "cause", "actor"]) == {}
    (finding,) = api["findings"]
    (kept,) = exported["findings"]
    assert (
        _same(finding, kept, ["id", "image_url", "page_url", "score", "verdict", "analysis_version", "created_at"])
        == {}
    )
    assert (api["recheck_plan"], exported["recheck_plan"]) == (None, None)


def test_a_held_and_resumed_jobs_history_reads_the_same_in_both(client):
    from jobs.services import job_hold, job_resume
    from workers.runtime.services import job_submit

    job = job_submit(job_type="synthetic", payload={}, idempotency_key=uuid.uuid4().hex, actor="t").job
    job_hold(job_id=job.pk, actor="user:ops", reason="the customer asked us to wait")
    job_resume(job_id=job.pk, actor="user:ops", reason="go on")
    _, secret = token_create(name="core", scopes=["jobs:read", "jobs:all"])
    api = client.get(f"/api/v1/jobs/{job.pk}", HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    exported = json.loads(export_json(job_export(Job.objects.get(pk=job.pk))))
    assert [t["to_state"] for t in api["transitions"]] == ["planned", "held", "planned"]
    for read, kept in zip(api["transitions"], exported["transitions"], strict=True):
        assert _same(read, kept, ["from_state", "to_state", "at", "lease_version", "cause", "actor"]) == {}
    assert _same(api, exported["job"], [name for name in api if name in exported["job"]]) == {}
