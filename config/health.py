"""``/healthz`` and ``/readyz`` for load balancers and orchestrators, answered before any other
middleware: a probe sends whatever ``Host`` it likes (an IP address), carries no session, and must
not count against the API's budgets.

- ``GET /healthz`` — the process serves requests: 200 ``{"status": "alive"}``, no database touched.
- ``GET /readyz`` — it can do its work: the database answers and every migration this code knows
  is applied: 200 ``{"status": "ready", …}``, otherwise 503 with what is missing. Once the
  migrations were found applied the process remembers it (code and migrations change together, at
  a deploy, with a new process); the database is asked every time (one ``SELECT 1``).
"""

from __future__ import annotations

import json

from django.db import DatabaseError, connection
from django.http import HttpResponse

_migrated = False


def _answer(status: int, document: dict) -> HttpResponse:
    response = HttpResponse(json.dumps(document), status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


def readiness() -> tuple[bool, dict]:
    global _migrated
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        return False, {"status": "not ready", "database": f"unreachable: {type(error).__name__}"}
    if not _migrated:
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            return False, {"status": "not ready", "database": "ok", "migrations": f"{len(plan)} not applied"}
        _migrated = True
    return True, {"status": "ready", "database": "ok", "migrations": "applied"}


class HealthMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/healthz":
            return _answer(200, {"status": "alive"})
        if request.path == "/readyz":
            ready, document = readiness()
            return _answer(200 if ready else 503, document)
        return self.get_response(request)
