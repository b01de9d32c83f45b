"""The source-schedule resource: a jobs:all client reads every source's schedule and sets one; bad
schedules are refused with the field named and change nothing."""

import json

import pytest

from api.tokens import token_create
from jobs.models import Batch
from workers.pipeline.models import Source
from workers.pipeline.services import crawl_start, source_upsert

pytestmark = pytest.mark.django_db


@pytest.fixture
def core(client):
    _, clear = token_create(name="php-core", scopes=["jobs:read", "jobs:write", "jobs:all"])
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def put(client, headers, source, body):
    return client.put(
        f"/api/v1/sources/{source.pk}/schedule", json.dumps(body), content_type="application/json", **headers
    )


def test_the_php_core_reads_and_sets_a_schedule(client, core):
    source = source_upsert(name="Archiv", base_url="http://127.0.0.1:9/")
    crawl_start(actor="test", sources=[source], run="first")
    (listed,) = client.get("/api/v1/sources", **core).json()
    assert listed["name"] == "Archiv" and listed["is_default_interval"] and listed["crawl_every_minutes"] == 1440
    assert listed["last_run"]["name"] == "crawl run first" and listed["last_run"]["finished_at"] is None
    assert (listed["due"], listed["waiting"], listed["next_run_at"]) == (False, "previous run still running", None)

    answer = put(
        client,
        core,
        source,
        {"crawl_every_minutes": 360, "window_start": "22:00", "window_end": "04:00", "time_zone": "Europe/Berlin"},
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["crawl_every_minutes"], body["window_start"], body["window_end"], body["time_zone"]) == (
        360,
        "22:00:00",
        "04:00:00",
        "Europe/Berlin",
    )
    # Read back: the schedule as set; its run finished, the source no longer waits for it.
    Batch.objects.update(finished_at=Batch.objects.get().created_at)
    again = client.get(f"/api/v1/sources/{source.pk}/schedule", **core).json()
    moving = ("last_run", "due", "waiting", "next_run_at")
    assert {k: v for k, v in again.items() if k not in moving} == {k: v for k, v in body.items() if k not in moving}
    assert again["last_run"]["finished_at"] is not None and again["waiting"] != "previous run still running"
    assert again["next_run_at"] is not None and again["due"] == (again["waiting"] == "")

    # Leaving fields out resets them: the default interval, no window, the installation's zone.
    assert put(client, core, source, {}).json()["is_default_interval"] is True
    assert Source.objects.filter(pk=source.pk, window_start=None, time_zone="").exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"crawl_every_minutes": 0}, "crawl_every_minutes"),
        ({"crawl_every_minutes": 44641}, "crawl_every_minutes"),
        ({"crawl_every_minutes": "often"}, "crawl_every_minutes"),
        ({"window_start": "02:00"}, "window_start"),
        ({"window_start": "02:00", "window_end": "02:00"}, "window_end"),
        ({"window_start": "02:00+01:00", "window_end": "04:00"}, "window_start"),
        ({"window_start": "25:00", "window_end": "04:00"}, "window_start"),
        ({"time_zone": "Mars/Olympus"}, "time_zone"),
        ({"time_zone": "../../../etc/passwd"}, "time_zone"),
        ({"time_zone": "x" * 65}, "time_zone"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_field(client, core, body, field):
    source = source_upsert(name="Archiv", base_url="http://127.0.0.1:9/", crawl_every_minutes=30)
    answer = put(client, core, source, body)
    assert answer.status_code == 422, answer.content
    assert field in json.dumps(answer.json())
    assert Source.objects.get(pk=source.pk).crawl_every_minutes == 30


def test_an_unknown_source_is_404(client, core):
    assert client.get("/api/v1/sources/999/schedule", **core).status_code == 404
    assert put(client, core, Source(pk=999), {"crawl_every_minutes": 60}).status_code == 404
