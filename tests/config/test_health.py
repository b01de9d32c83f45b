"""/healthz and /readyz for load balancers: answered whatever the Host header, without a session or
an API token; /readyz is 503 with the reason while the database is unreachable or a migration is
missing."""

import json
import os
import subprocess
import sys

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from config import health
from tests.support.db import PROJECT_ROOT, as_owner


@pytest.fixture(autouse=True)
def forget_migrated():
    health._migrated = False
    yield
    health._migrated = False


def test_alive_and_ready_for_any_host(client, db):
    alive = client.get("/healthz", HTTP_HOST="10.0.0.9")  # a load balancer's probe: no allowed host
    assert alive.status_code == 200 and alive.json() == {"status": "alive"}
    ready = client.get("/readyz", HTTP_HOST="10.0.0.9")
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "database": "ok", "migrations": "applied"}
    assert ready["Cache-Control"] == "no-store"


@pytest.mark.django_db(transaction=True)
def test_not_ready_while_a_migration_is_missing(client):
    """The application role may not touch django_migrations: the owner hides one, then puts it back."""
    last = MigrationRecorder.Migration.objects.filter(app="dashboard").order_by("-id").first()

    def as_the_owner(change):
        with as_owner():
            connection.close()
            change()
            connection.close()
        connection.close()  # the next query reconnects as the application

    as_the_owner(lambda: MigrationRecorder.Migration.objects.filter(pk=last.pk).delete())
    try:
        answer = client.get("/readyz")
        assert answer.status_code == 503 and answer.json()["migrations"] == "1 not applied"
    finally:
        as_the_owner(
            lambda: MigrationRecorder.Migration.objects.create(app=last.app, name=last.name, applied=last.applied)
        )
    health._migrated = False
    assert client.get("/readyz").status_code == 200


def test_not_ready_while_the_database_is_unreachable():
    """A real process pointed at a port nothing listens on."""
    script = (
        "import django, json; django.setup(); from django.test import Client; "
        "r = Client().get('/readyz'); print(r.status_code, r.content.decode())"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgres://nobody:x@127.0.0.1:1/nothing",
        "LEITSTAND_DEBUG": "true",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    status, _, body = done.stdout.strip().partition(" ")
    assert status == "503", done.stdout + done.stderr
    assert json.loads(body)["database"] == "unreachable: OperationalError"
