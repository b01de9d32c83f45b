"""Settings and URLs for ``bench.submit_rate``'s servers: Leitstand's own, plus a bare Django view.

``DJANGO_SETTINGS_MODULE=bench.bare_site`` serves everything ``config.urls`` serves, and
``POST /bench/insert``: a view that parses the JSON body and inserts it as one row into
``bench_bare_insert`` (no authentication, validation, idempotency or transition log) — the floor a
submission through the API is compared with, on the same server and the same middleware.
"""

import json

from django.db import connection
from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from config.test_settings import *  # noqa: F403

ROOT_URLCONF = "bench.bare_site"

TABLE = "bench_bare_insert"


@csrf_exempt
def bare_insert(request):
    body = json.loads(request.body)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {TABLE} (body) VALUES (%s) RETURNING id", [json.dumps(body)])
        (row_id,) = cursor.fetchone()
    return JsonResponse({"id": row_id}, status=201)


def _urlpatterns():
    from config.urls import urlpatterns

    return [path("bench/insert", bare_insert), *urlpatterns]


def __getattr__(name):  # the URLconf is read after settings are loaded
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)
