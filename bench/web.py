"""The API and the console over HTTP under load: the production web server (gunicorn with
config/gunicorn_conf.py, as ``scripts/serve`` runs it) side by side with Django's ``runserver`` in
the same run, on the same database.

Run: .venv/bin/python -m bench.web [--clients 50] [--seconds 60] [--preload 200000] [--rate 100]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

Each server runs in its own process group on a loopback port with ``LEITSTAND_DEBUG=false``; the
load comes from this process: ``--clients`` concurrent clients (asyncio, httpx), each looping for
``--seconds`` over a mix like the PHP core's and the console's — 20 % single submissions
(``POST /api/v1/jobs``), 45 % reads of one job, 25 % list pages (``GET /api/v1/jobs?limit=50``), 10 %
the console home's live part (``GET /admin/`` with ``HX-Request``, as a logged-in operator). Two phases
per server: **capacity**, each client in a closed loop (it sends when its last answer came), and then
**a fixed arrival rate** of ``--rate`` requests per second of the same mix, spread over the same clients,
latency taken from each request's scheduled send time (no coordinated omission). Reported per server,
phase and kind (and "reads": reads, lists and the console together): requests, throughput, p50 and p99
latency (client-side: queueing included), errors (any status other than the expected, and connection
failures). The load generator shares the machine's two cores with the server and PostgreSQL: figures
are for comparing servers and revisions, not absolute capacity.
"""

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.core.management import call_command  # noqa: E402

from api.tokens import token_create  # noqa: E402
from bench.console import load  # noqa: E402
from config import gunicorn_conf  # noqa: E402
from dashboard.operations.snapshot import snapshot_refresh  # noqa: E402
from dashboard.roles import OPERATORS, roles_ensure  # noqa: E402
from jobs.models import Job  # noqa: E402
from tests.support.db import PROJECT_ROOT, child_env  # noqa: E402
from tests.support.servers import free_port, wait_until_answers  # noqa: E402

MIX = (("submit", 0.20), ("read", 0.45), ("list", 0.25), ("console", 0.10))
READS = ("read", "list", "console")


def start(kind: str, port: int, **extra: str) -> subprocess.Popen:
    """A server on a loopback port, as production runs it, the API's limits raised for the run;
    ``extra`` adds to its environment (another settings module, say)."""
    env = child_env(
        LEITSTAND_DEBUG="false",
        LEITSTAND_ALLOWED_HOSTS="127.0.0.1",
        LEITSTAND_API_RATE_PER_MINUTE="100000000",
        LEITSTAND_API_JOBS_PER_MINUTE="100000000",
        LEITSTAND_WEB_BIND=f"127.0.0.1:{port}",
        LEITSTAND_WEB_ACCESS_LOG="",
        **extra,
    )
    command = {
        "gunicorn": [str(PROJECT_ROOT / "scripts" / "serve")],
        # granian with gunicorn's process and thread counts from config/gunicorn_conf.py.
        "granian": [
            str(Path(sys.executable).parent / "granian"),
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(gunicorn_conf.workers),
            "--blocking-threads",
            str(gunicorn_conf.threads),
            "--no-ws",
            "config.wsgi:application",
        ],
        "runserver": [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
    }[kind]
    server = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/readyz", server, timeout=60)
    except AssertionError:
        os.killpg(server.pid, signal.SIGKILL)
        raise
    return server


def stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


async def send(http, kind, api, console, job_ids) -> bool:
    """One request of the mix; whether it got the answer it should."""
    try:
        if kind == "submit":
            body = {"type": "synthetic", "payload": {}, "idempotency_key": uuid.uuid4().hex}
            response = await http.post("/api/v1/jobs", json=body, headers=api)
            return response.status_code == 201
        if kind == "read":
            response = await http.get(f"/api/v1/jobs/{random.choice(job_ids)}", headers=api)
            return response.status_code == 200
        if kind == "list":
            response = await http.get("/api/v1/jobs", params={"limit": 50}, headers=api)
            return response.status_code == 200
        response = await http.get("/admin/", headers=console)
        return response.status_code == 200 and b"console-nav" in response.content
    except httpx.HTTPError:
        return False


async def load_run(base, token, session, job_ids, args, results, rate=None):
    """``args.clients`` clients for ``args.seconds``: in a closed loop (each sends when its last answer
    came), or, with ``rate``, together at that many requests per second, each client every
    ``clients / rate`` seconds, offset from the others, and latency taken from the scheduled send time
    (a send that could not leave on time counts as waiting: no coordinated omission)."""
    api = {"Authorization": f"Bearer {token}"}
    console = {"HX-Request": "true", "Cookie": f"{settings.SESSION_COOKIE_NAME}={session}"}
    kinds, weights = zip(*MIX)

    async def client(n: int):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            await http.get("/healthz")  # the connection is open before the clock starts
            if rate is None:
                end = time.monotonic() + args.seconds
                while time.monotonic() < end:
                    kind = random.choices(kinds, weights)[0]
                    started = time.perf_counter()
                    ok = await send(http, kind, api, console, job_ids)
                    results.append((kind, (time.perf_counter() - started) * 1000, ok))
                return
            interval = args.clients / rate
            start = time.perf_counter() + 0.5 + n * interval / args.clients
            for k in range(int(args.seconds * rate / args.clients)):
                scheduled = start + k * interval
                if (delay := scheduled - time.perf_counter()) > 0:
                    await asyncio.sleep(delay)
                kind = random.choices(kinds, weights)[0]
                ok = await send(http, kind, api, console, job_ids)
                results.append((kind, (time.perf_counter() - scheduled) * 1000, ok))

    await asyncio.gather(*(client(n) for n in range(args.clients)))


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--preload", type=int, default=200_000)
    parser.add_argument("--servers", default="gunicorn,runserver", help="any of gunicorn, granian, runserver")
    parser.add_argument("--rate", type=float, default=100, help="the fixed-rate phase's requests per second (0: none)")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    if args.preload:
        print(f"preloading {args.preload:,} jobs …", flush=True)
        load(args.preload)
    snapshot_refresh()
    _, token = token_create(name=f"web-{uuid.uuid4().hex[:6]}", scopes=["jobs:read", "jobs:write", "jobs:synthetic"])
    operator = get_user_model().objects.create_user(f"op-{uuid.uuid4().hex[:6]}", password="x" * 12, is_staff=True)
    operator.groups.add(roles_ensure()[OPERATORS])
    session = SessionStore()
    session["_auth_user_id"], session["_auth_user_backend"] = (
        str(operator.pk),
        "django.contrib.auth.backends.ModelBackend",
    )
    session["_auth_user_hash"] = operator.get_session_auth_hash()
    session.create()
    report = {}
    for kind in args.servers.split(","):
        port = free_port()
        server = start(kind, port)
        base = f"http://127.0.0.1:{port}"
        try:
            # What the reads read: jobs of the token's own client (a token sees its client's jobs only).
            job_ids = [
                httpx.post(
                    f"{base}/api/v1/jobs",
                    json={"type": "synthetic", "payload": {}, "idempotency_key": uuid.uuid4().hex},
                    headers={"Authorization": f"Bearer {token}"},
                ).json()["id"]
                for _ in range(50)
            ]
            results: list = []
            asyncio.run(load_run(base, token, session.session_key, job_ids, args, results))
            timed: list = []
            if args.rate:
                asyncio.run(load_run(base, token, session.session_key, job_ids, args, timed, rate=args.rate))
        finally:
            stop(server)
        report[kind] = results, timed
    print(
        f"\n{args.clients} clients for {args.seconds:g} s each server and phase; {args.preload:,} jobs preloaded; "
        f"{Job.objects.count():,} jobs after"
    )
    phases = (("capacity", 0), (f"{args.rate:g}/s", 1)) if args.rate else (("capacity", 0),)
    print(
        f"{'server':<10} {'phase':<9} {'kind':<9} {'requests':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}"
    )
    for kind, runs in report.items():
        for phase, n in phases:
            for name in ("all", "reads", *dict(MIX)):
                rows = [r for r in runs[n] if name == "all" or r[0] == name or (name == "reads" and r[0] in READS)]
                latencies = [ms for _, ms, _ in rows]
                errors = sum(1 for *_, ok in rows if not ok)
                print(
                    f"{kind:<10} {phase:<9} {name:<9} {len(rows):>9,} {len(rows) / args.seconds:>8.0f} "
                    f"{statistics.median(latencies) if latencies else float('nan'):>8.1f} "
                    f"{percentile(latencies, 0.99):>8.1f} {errors:>7}"
                )


if __name__ == "__main__":
    main()
