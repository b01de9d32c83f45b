"""The flow keys of a pool through the API (jobs:all): read them a page at a time, set a key's
weight, limit or pause with a reason; a token without jobs:all or jobs:write is refused, and a bad
value is a 422 naming its field that changes nothing."""

import json
import uuid

import pytest

from api.tokens import token_create
from jobs import insert
from jobs.models import FlowKey
from jobs.retry import RetryPolicy
from workers.runtime.registry import JobType, registry

pytestmark = pytest.mark.django_db
POOL = "flowapi"


@pytest.fixture(autouse=True)
def keyed_pool():
    # A pool API clients' jobs run in: a submittable type's own.
    registry.register(
        JobType(
            name=POOL,
            handler=lambda context: None,
            pool=POOL,
            timeout_seconds=5,
            lease_seconds=30,
            heartbeat_seconds=1,
            retry=RetryPolicy(base_seconds=1, cap_seconds=5),
            processing_version="test@1",
            expected_paths=("work",),
            client_scope="jobs:all",
        )
    )
    yield
    registry.unregister(POOL)


@pytest.mark.parametrize("pool", ["notify", "recheck"])
def test_a_pool_of_the_systems_own_work_is_not_a_clients_to_steer(client, pool):
    core = bearer("jobs:read", "jobs:write", "jobs:all")
    answer = client.put(
        f"/api/v1/pools/{pool}/keys",
        json.dumps({"key": "", "paused": True, "reason": "silence every alert"}),
        content_type="application/json",
        **core,
    )
    assert answer.status_code == 403 and "set by operators in the console" in answer.json()["detail"]
    assert client.get(f"/api/v1/pools/{pool}/keys", **core).status_code == 403
    assert not FlowKey.objects.exists()


def test_an_unknown_pool_is_404_and_nothing_is_created(client):
    core = bearer("jobs:read", "jobs:write", "jobs:all")
    answer = client.put(
        "/api/v1/pools/no-such-pool/keys",
        json.dumps({"key": "", "paused": True, "reason": "x"}),
        content_type="application/json",
        **core,
    )
    assert answer.status_code == 404 and not FlowKey.objects.exists()
    assert client.get("/api/v1/pools/no-such-pool/keys", **core).status_code == 404


def bearer(*scopes):
    _, clear = token_create(name=f"t-{uuid.uuid4().hex[:6]}", scopes=list(scopes))
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def put(client, headers, body):
    return client.put(f"/api/v1/pools/{POOL}/keys", json.dumps(body), content_type="application/json", **headers)


def submit(key, count):
    for _ in range(count):
        insert.job_insert(
            type=POOL, idempotency_key=uuid.uuid4().hex, payload={"k": key}, actor="t", flow_key_declaration="payload.k"
        )


def test_the_php_core_reads_the_keys_and_limits_one(client):
    core = bearer("jobs:read", "jobs:write", "jobs:all")
    submit("client:shop", 3)
    submit("", 2)
    listed = client.get(f"/api/v1/pools/{POOL}/keys", **core).json()
    assert [(item["key"], item["waiting"], item["running"], item["weight"]) for item in listed["items"]] == [
        ("", 2, 0, 1),
        ("client:shop", 3, 0, 1),
    ]
    assert listed["next_after"] is None
    answer = put(client, core, {"key": "client:shop", "max_running": 2, "weight": 4, "reason": "a partner's limit"})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["key"], body["max_running"], body["limit"], body["weight"], body["paused"], body["waiting"]) == (
        "client:shop",
        2,
        2,
        4,
        False,
        3,
    )
    # Left out: unchanged; null: back to the pool's default.
    answer = put(client, core, {"key": "client:shop", "max_running": None, "reason": "limit lifted"})
    assert (answer.json()["max_running"], answer.json()["weight"]) == (None, 4)


def test_a_rate_limit_is_set_read_and_lifted(client):
    core = bearer("jobs:read", "jobs:write", "jobs:all")
    answer = put(client, core, {"key": "client:shop", "rate_starts": 10, "rate_seconds": 60, "reason": "their API"})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["rate_starts"], body["rate_seconds"], body["rate_limited_until"]) == (10, 60, None)
    listed = client.get(f"/api/v1/pools/{POOL}/keys", **core).json()["items"]
    assert [(i["key"], i["rate_starts"], i["rate_seconds"]) for i in listed] == [("client:shop", 10, 60)]
    answer = put(client, core, {"key": "client:shop", "rate_starts": None, "rate_seconds": None, "reason": "lifted"})
    assert (answer.json()["rate_starts"], answer.json()["rate_seconds"]) == (None, None)


def test_pages_of_keys_follow_each_other(client):
    core = bearer("jobs:read", "jobs:all")
    for n in range(5):
        submit(f"k{n}", 1)
    first = client.get(f"/api/v1/pools/{POOL}/keys?limit=2", **core).json()
    assert [i["key"] for i in first["items"]] == ["k0", "k1"] and first["next_after"] == "k1"
    second = client.get(f"/api/v1/pools/{POOL}/keys?limit=2&after=k1", **core).json()
    assert [i["key"] for i in second["items"]] == ["k2", "k3"]


@pytest.mark.parametrize(
    "scopes, status",
    [(("jobs:read", "jobs:write"), 403), (("jobs:read", "jobs:all"), 403)],
)
def test_a_token_without_jobs_all_or_jobs_write_changes_nothing(client, scopes, status):
    answer = put(client, bearer(*scopes), {"key": "x", "paused": True, "reason": "r"})
    assert answer.status_code == status
    assert not FlowKey.objects.exists()
    if "jobs:all" not in scopes:
        assert client.get(f"/api/v1/pools/{POOL}/keys", **bearer(*scopes)).status_code == 403


@pytest.mark.parametrize(
    "body, field",
    [
        ({"key": "x", "weight": 0, "reason": "r"}, "weight"),
        ({"key": "x", "weight": 1001, "reason": "r"}, "weight"),
        ({"key": "x", "weight": "3", "reason": "r"}, "weight"),
        ({"key": "x", "weight": True, "reason": "r"}, "weight"),
        ({"key": "x", "max_running": 0, "reason": "r"}, "max_running"),
        ({"key": "x", "paused": "yes", "reason": "r"}, "paused"),
        ({"key": "x", "rate_starts": 5, "reason": "r"}, "rate_seconds"),
        ({"key": "x", "rate_seconds": None, "reason": "r"}, "rate_seconds"),
        ({"key": "x", "rate_starts": None, "rate_seconds": 5, "reason": "r"}, "rate_seconds"),
        ({"key": "x", "rate_starts": 0, "rate_seconds": 5, "reason": "r"}, "rate_starts"),
        ({"key": "x", "rate_starts": 5, "rate_seconds": 86_401, "reason": "r"}, "rate_seconds"),
        ({"key": "x", "rate_starts": "5", "rate_seconds": 5, "reason": "r"}, "rate_starts"),
        ({"key": "x", "paused": None, "reason": "r"}, "paused"),
        ({"key": "x", "weight": 2, "reason": "  "}, "reason"),
        ({"key": "x", "weight": 2}, "reason"),
        ({"key": "a\nb", "weight": 2, "reason": "r"}, "key"),
        ({"key": "x" * 256, "weight": 2, "reason": "r"}, "key"),
        ({"key": "x\u0000", "weight": 2, "reason": "r"}, "key"),
    ],
)
def test_a_bad_value_is_a_422_naming_its_field(client, body, field):
    answer = put(client, bearer("jobs:read", "jobs:write", "jobs:all"), body)
    assert answer.status_code == 422, answer.content
    assert field in answer.content.decode()
    assert not FlowKey.objects.exists()


def test_a_page_that_ends_at_the_empty_key_goes_on_after_it(client):
    core = bearer("jobs:read", "jobs:all")
    submit("", 1)
    submit("k", 1)
    first = client.get(f"/api/v1/pools/{POOL}/keys?limit=1", **core).json()
    assert [i["key"] for i in first["items"]] == [""] and first["next_after"] == ""
    second = client.get(f"/api/v1/pools/{POOL}/keys?limit=1&after=", **core).json()
    assert [i["key"] for i in second["items"]] == ["k"] and second["next_after"] is None


def test_keys_are_read_and_set_as_they_were_named(client):
    """Attack (issue 54, item 15): a key named like another's encoding is a key of its own; the API
    shows and takes names, with the stored form beside."""
    core = bearer("jobs:read", "jobs:write", "jobs:all")
    submit("Bücher", 2)
    answer = put(client, core, {"key": "B%C3%BCcher", "paused": True, "reason": "another key"})
    assert (answer.json()["key"], answer.json()["stored"], answer.json()["waiting"]) == (
        "B%C3%BCcher",
        "B%25C3%25BCcher",
        0,
    )
    listed = client.get(f"/api/v1/pools/{POOL}/keys?limit=1", **core).json()
    assert [(i["key"], i["stored"], i["paused"]) for i in listed["items"]] == [("B%C3%BCcher", "B%25C3%25BCcher", True)]
    rest = client.get(f"/api/v1/pools/{POOL}/keys", {"limit": 1, "after": listed["next_after"]}, **core).json()
    assert [(i["key"], i["stored"], i["waiting"], i["paused"]) for i in rest["items"]] == [
        ("Bücher", "B%C3%BCcher", 2, False)
    ]
