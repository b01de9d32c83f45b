"""Alerting's models moved from the console (``dashboard``) to ``alerts``, the archive's to
``history`` and the audit log's to ``jobs``: tables, rows, content types and the permissions the roles
hold on them survive the move, both ways."""

import pytest
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from alerts.models import Owner, Route
from dashboard.roles import OPERATORS, VIEWERS, roles_ensure
from history.models import ArchiveFile
from jobs.audit import audit_record
from jobs.models import AuditEntry
from tests.support.db import migrate_to

BEFORE = [
    ("dashboard", "0017_route_limits"),
    ("alerts", None),
    ("history", None),
    ("jobs", "0042_client_most_urgent_lane"),
]
MOVED = {"alerts": ["route", "owner", "alert", "silence"], "history": ["archivefile"], "jobs": ["auditentry"]}


def labels(model: str) -> set[str]:
    return set(ContentType.objects.filter(model=model).values_list("app_label", flat=True))


@pytest.mark.django_db(transaction=True)
def test_the_moved_models_keep_their_rows_content_types_and_grants_both_ways():
    roles = roles_ensure()
    route = Route.objects.create(name="ops", owner=Owner.objects.create(name="Platform"))
    ArchiveFile.objects.create(path="jobs/2026-12-01/crawl/a.jsonl.gz", day="2026-12-01", job_type="crawl")
    audit_record(actor="user:op", action="route.edit", target="route:ops", result="ok")
    try:
        migrate_to(BEFORE)
        for app, models in MOVED.items():
            for model in models:
                assert labels(model) == {"dashboard"}, (app, model)
        with connection.cursor() as cursor:  # the previous schema: the console's tables, rows kept
            cursor.execute("SELECT name FROM dashboard_route")
            assert cursor.fetchall() == [("ops",)]
            cursor.execute(
                "SELECT count(*) FROM dashboard_archivefile UNION ALL SELECT count(*) FROM dashboard_auditentry"
            )
            assert cursor.fetchall() == [(1,), (1,)]
        operators = Group.objects.get(name=OPERATORS)
        assert operators.permissions.filter(content_type__app_label="dashboard", codename="change_route").exists()
        assert Group.objects.get(name=VIEWERS).permissions.filter(codename="view_auditentry").exists()
    finally:
        migrate_to(None)
    for app, models in MOVED.items():
        for model in models:
            assert labels(model) == {app}, (app, model)
    assert roles[OPERATORS].permissions.filter(content_type__app_label="alerts", codename="change_route").exists()
    assert roles[VIEWERS].permissions.filter(content_type__app_label="jobs", codename="view_auditentry").exists()
    assert Route.objects.get(name="ops").pk == route.pk and ArchiveFile.objects.count() == 1
    assert AuditEntry.objects.filter(action="route.edit").count() == 1
