"""The API's token models moved from the ``jobs`` app to ``api``: tables, rows, content types and the
permissions granted on them survive the move, both ways."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from api.models import ApiRateWindow, ApiToken
from api.tokens import token_admit, token_check, token_create
from tests.support.db import migrate_to

BEFORE = [("jobs", "0018_attempt_skipped_outcome"), ("api", None)]


def migrate(targets):
    migrate_to(targets)


@pytest.mark.django_db(transaction=True)
def test_tokens_and_their_permissions_survive_the_move_from_the_jobs_app():
    token, secret = token_create(name="php-core", scopes=["jobs:read"])
    token_admit(secret)  # one request counted: a rate window row
    granted = Group.objects.create(name="token admins")
    granted.permissions.add(Permission.objects.get(content_type__app_label="api", codename="add_apitoken"))
    try:
        migrate(BEFORE)
        assert not ContentType.objects.filter(app_label="api", model__in=["apitoken", "apiratewindow"]).exists()
        assert ContentType.objects.filter(app_label="jobs", model__in=["apitoken", "apiratewindow"]).count() == 2
        with connection.cursor() as cursor:  # the previous schema: the jobs app's tables, rows kept
            cursor.execute("SELECT name FROM jobs_apitoken")
            assert cursor.fetchall() == [("php-core",)]
        assert granted.permissions.filter(content_type__app_label="jobs", codename="add_apitoken").exists()
    finally:
        migrate(None)
    assert ContentType.objects.filter(app_label="api", model__in=["apitoken", "apiratewindow"]).count() == 2
    assert not ContentType.objects.filter(app_label="jobs", model__in=["apitoken", "apiratewindow"]).exists()
    assert granted.permissions.filter(content_type__app_label="api", codename="add_apitoken").exists()
    assert ApiToken.objects.get(name="php-core").pk == token.pk
    assert token_check(secret).name == "php-core"
    assert ApiRateWindow.objects.filter(token=token).exists()
