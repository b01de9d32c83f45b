"""Every endpoint refuses a token without its scope, and every endpoint refuses an expired and a
revoked token: each case fails if its check is removed (issue 17)."""

import json
from datetime import timedelta

import pytest

from api.models import ApiToken
from api.tokens import token_create, token_revoke
from jobs.models import Batch, Job, State, database_now
from tests.console.test_audited_actions import a_plan
from workers.pipeline.models import Source
from workers.pipeline.services import source_upsert

pytestmark = pytest.mark.django_db

SCOPES = ["jobs:read", "jobs:write", "jobs:all", "jobs:synthetic", "reviews:write"]  # the world is the system's


@pytest.fixture
def world(make_job):
    plan = a_plan()
    job = make_job("synthetic", pool="crawl", payload={})
    batch = Batch.objects.create(key="b", name="b", created_by="t", correlation_id="c")
    source = source_upsert(name="scoped", base_url="http://127.0.0.1:9/", crawl_every_minutes=60)
    return {"job": job, "plan": plan, "batch": batch, "source": source}


def endpoints(world):
    """(name, scope, method, path, body, what must not change)"""
    job, plan, batch = world["job"], world["plan"], world["batch"]
    schedule = f"/api/v1/sources/{world['source'].pk}/schedule"

    def every():
        return Source.objects.get(pk=world["source"].pk).crawl_every_minutes

    new_job = {"type": "synthetic", "payload": {}, "idempotency_key": "scoped"}
    return [
        ("submit", "jobs:write", "post", "/api/v1/jobs", new_job, lambda: Job.objects.count()),
        ("read", "jobs:read", "get", f"/api/v1/jobs/{job.pk}", None, None),
        ("list", "jobs:read", "get", "/api/v1/jobs", None, None),
        ("cancel", "jobs:write", "post", f"/api/v1/jobs/{job.pk}/cancel", {}, lambda: Job.objects.get(pk=job.pk).state),
        ("plan", "jobs:read", "get", f"/api/v1/rechecks/{plan.pk}", None, None),
        (
            "decision",
            "reviews:write",
            "post",
            f"/api/v1/rechecks/{plan.pk}/decision",
            {"reason": "seen"},
            lambda: type(plan).objects.get(pk=plan.pk).state,
        ),
        (
            "batch",
            "jobs:write",
            "post",
            "/api/v1/batches",
            {"key": "k", "name": "n", "jobs": [{**new_job, "idempotency_key": "in-batch"}]},
            lambda: Batch.objects.count(),
        ),
        ("batch read", "jobs:read", "get", f"/api/v1/batches/{batch.pk}", None, None),
        # Sources are shared by every client: reading and setting a schedule also needs jobs:all.
        ("sources", "jobs:all", "get", "/api/v1/sources", None, None),
        ("sources (read)", "jobs:read", "get", "/api/v1/sources", None, None),
        ("schedule", "jobs:all", "get", schedule, None, None),
        ("schedule set", "jobs:all", "put", schedule, {"crawl_every_minutes": 120}, every),
        ("schedule set (write)", "jobs:write", "put", schedule, {"crawl_every_minutes": 120}, every),
    ]


def call(client, token, method, path, body):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if method == "get":
        return client.get(path, **headers)
    return getattr(client, method)(path, json.dumps(body), content_type="application/json", **headers)


def test_every_endpoint_answers_a_token_with_every_scope(client, world):
    _, clear = token_create(name="all", scopes=SCOPES)
    for name, _, method, path, body, _ in endpoints(world):
        assert call(client, clear, method, path, body).status_code in (200, 201), name


@pytest.mark.parametrize("index", range(13))
def test_an_endpoint_refuses_a_token_without_its_scope(client, world, index):
    name, scope, method, path, body, unchanged = endpoints(world)[index]
    _, clear = token_create(name="almost", scopes=[s for s in SCOPES if s != scope])
    before = unchanged() if unchanged else None
    answer = call(client, clear, method, path, body)
    assert answer.status_code == 403, (name, answer.content)
    assert scope in answer.json()["detail"]
    assert (unchanged() if unchanged else None) == before


@pytest.mark.parametrize("index", range(13))
@pytest.mark.parametrize("how", ["expired", "revoked"])
def test_an_endpoint_refuses_an_expired_or_revoked_token(client, world, index, how):
    name, _, method, path, body, unchanged = endpoints(world)[index]
    token, clear = token_create(name="old", scopes=SCOPES)
    if how == "expired":
        ApiToken.objects.filter(pk=token.pk).update(expires_at=database_now() - timedelta(seconds=1))
    else:
        token_revoke(name="old")
    before = unchanged() if unchanged else None
    assert call(client, clear, method, path, body).status_code == 401, name
    assert (unchanged() if unchanged else None) == before
    assert Job.objects.get(pk=world["job"].pk).state == State.PLANNED
