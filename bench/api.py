"""The REST API's reads at millions of jobs: server time per request, with and without the list's index.

Run: .venv/bin/python -m bench.api [--jobs 2000000] [--repeat 5]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set; the jobs are loaded as in
``bench.console``: three types, 80 % done, the rest over every other state).

The PHP core reads jobs with ``GET /api/v1/jobs`` in the order of their last state change,
keyset-paginated (``state_changed_at, id``), usually with ``updated_after`` to pick up what changed
since its last poll. Each request is made as a token holder (Django's test client, in this
process). The baseline, measured in the same run on the same table, is the same request with the
list's index (``job_changed_idx``) dropped inside a transaction that is rolled back afterwards.
"""

import argparse
import base64
import os
from datetime import timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
os.environ.setdefault("LEITSTAND_ALLOWED_HOSTS", "testserver")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from api.tokens import token_create  # noqa: E402
from bench.console import load, measure  # noqa: E402
from jobs.models import Job  # noqa: E402

INDEX = "job_changed_idx"


def cursor_at(job: Job) -> str:
    return base64.urlsafe_b64encode(f"{job.state_changed_at.isoformat()}|{job.id}".encode()).decode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(f"loading {args.jobs:,} jobs …", flush=True)
    print(f"loaded in {load(args.jobs):.0f} s")
    _, secret = token_create(name="bench", scopes=["jobs:read", "jobs:all"])  # every job, as the PHP core
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    middle = Job.objects.order_by("state_changed_at", "id")[args.jobs // 2]
    some = Job.objects.filter(state="dead").order_by("-created_at").first()
    recent = (timezone.now() - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    requests = {
        "first page (50), no filter": "/api/v1/jobs",
        "a page from the middle (cursor)": f"/api/v1/jobs?cursor={cursor_at(middle)}",
        "500 a page, no filter": "/api/v1/jobs?limit=500",
        "updated_after = 5 minutes ago": f"/api/v1/jobs?updated_after={recent}",
        "type=crawl & state=planned": "/api/v1/jobs?type=crawl&state=planned",
        "state=dead": "/api/v1/jobs?state=dead",
        "correlation_id": f"/api/v1/jobs?correlation_id={some.correlation_id}",
        "one job (GET /jobs/{id})": f"/api/v1/jobs/{some.id}",
    }

    def timed(url: str) -> float:
        ms, _, status = measure(client, url, args.repeat)
        assert status == 200, (url, status)
        return ms

    with_index = {name: timed(url) for name, url in requests.items()}
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX {INDEX}")
        without = {name: timed(url) for name, url in requests.items()}
        transaction.set_rollback(True)
    print(f"\n{args.jobs:,} jobs; median of {args.repeat} requests; server time in this process")
    print(f"{'request':<36} {'ms':>8} {'without ' + INDEX + ' ms':>26} {'ratio':>7}")
    for name in requests:
        print(f"{name:<36} {with_index[name]:>8.1f} {without[name]:>26.1f} {without[name] / with_index[name]:>6.1f}×")


if __name__ == "__main__":
    main()
