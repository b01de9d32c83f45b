"""Single submissions over HTTP: ``POST /api/v1/jobs`` next to a bare Django view inserting one row.

Run: .venv/bin/python -m bench.submit_rate [--clients 8] [--seconds 20] [--rate-share 0.5]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

One production server (gunicorn with config/gunicorn_conf.py, as ``scripts/serve`` runs it,
``LEITSTAND_DEBUG=false``) serves both endpoints with the same middleware (``bench/bare_site.py``):
the API's submission (a token with its limits raised for the run: authentication, scope, rate window,
validation, idempotency, the job with its creation transition, the wake-up) and the **baseline**, a
bare view that parses the JSON body and inserts it as one row into a table without indexes.

Two phases per endpoint, in the same run:
1. **capacity**: ``--clients`` clients in a closed loop for ``--seconds`` — requests per second.
2. **fixed arrival rate**: the same clients send at a fixed rate for ``--seconds`` — ``--rate-share``
   of the API's measured capacity, the same rate for both endpoints — and latency is taken from each
   request's scheduled send time (a late send counts as waiting; no coordinated omission).
The load generator (asyncio, httpx) shares the two cores with the server and PostgreSQL.
"""

import argparse
import asyncio
import os
import statistics
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402

from api.tokens import token_create  # noqa: E402
from bench.bare_site import TABLE  # noqa: E402
from bench.web import percentile, start, stop  # noqa: E402
from config.db_roles import APPLICATION  # noqa: E402
from tests.support.servers import free_port  # noqa: E402


class Endpoint:
    def __init__(self, name: str, path: str, headers: dict, body) -> None:
        self.name, self.path, self.headers, self.body = name, path, headers, body

    async def send(self, http: httpx.AsyncClient) -> bool:
        try:
            response = await http.post(self.path, json=self.body(), headers=self.headers)
        except httpx.HTTPError:
            return False
        return response.status_code == 201


async def closed_loop(base: str, endpoint: Endpoint, clients: int, seconds: float) -> tuple[int, int]:
    done = errors = 0

    async def client():
        nonlocal done, errors
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                ok = await endpoint.send(http)
                done += 1
                errors += not ok

    await asyncio.gather(*(client() for _ in range(clients)))
    return done, errors


async def fixed_rate(base: str, endpoint: Endpoint, clients: int, seconds: float, rate: float) -> tuple[list, int]:
    """Each client sends every ``clients / rate`` seconds, offset from the others; latency from the scheduled time."""
    latencies, errors = [], 0
    interval = clients / rate

    async def client(n: int):
        nonlocal errors
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            await http.get("/healthz")  # the connection is open before the clock starts
            start = time.perf_counter() + 0.5 + n * interval / clients
            for k in range(int(seconds * rate / clients)):
                scheduled = start + k * interval
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                ok = await endpoint.send(http)
                latencies.append((time.perf_counter() - scheduled) * 1000)
                errors += not ok

    await asyncio.gather(*(client(n) for n in range(clients)))
    return latencies, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate-share", type=float, default=0.5, help="fixed rate as a share of the API's capacity")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, body jsonb NOT NULL)")
        cursor.execute(f"GRANT SELECT, INSERT ON {TABLE} TO {APPLICATION}")
        cursor.execute(f"GRANT USAGE ON SEQUENCE {TABLE}_id_seq TO {APPLICATION}")
    _, token = token_create(name=f"rate-{uuid.uuid4().hex[:6]}", scopes=["jobs:write", "jobs:synthetic"])
    job = lambda: {"type": "synthetic", "payload": {}, "idempotency_key": uuid.uuid4().hex}  # noqa: E731
    endpoints = [
        Endpoint("bare view, one row (baseline)", "/bench/insert", {}, job),
        Endpoint("POST /api/v1/jobs", "/api/v1/jobs", {"Authorization": f"Bearer {token}"}, job),
    ]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start("gunicorn", port, DJANGO_SETTINGS_MODULE="bench.bare_site")
    try:
        for endpoint in endpoints:  # warm every worker process up
            asyncio.run(closed_loop(base, endpoint, args.clients, 2))
        capacity = {e.name: asyncio.run(closed_loop(base, e, args.clients, args.seconds)) for e in endpoints}
        rate = args.rate_share * capacity[endpoints[1].name][0] / args.seconds
        timed = {e.name: asyncio.run(fixed_rate(base, e, args.clients, args.seconds, rate)) for e in endpoints}
    finally:
        stop(server)
    baseline = capacity[endpoints[0].name][0]
    print(f"\n{args.clients} clients, {args.seconds:g} s per phase; gunicorn as scripts/serve runs it")
    print(
        f"{'endpoint':<32} {'capacity/s':>10} {'of bare':>8} {'errors':>7} | at {rate:.0f}/s: {'p50 ms':>7} {'p99 ms':>7} {'errors':>7}"
    )
    for endpoint in endpoints:
        done, errors = capacity[endpoint.name]
        latencies, timed_errors = timed[endpoint.name]
        print(
            f"{endpoint.name:<32} {done / args.seconds:>10.0f} {done / baseline:>8.2f} {errors:>7} | "
            f"{'':>{len(f'at {rate:.0f}/s:')}} {statistics.median(latencies):>7.1f} "
            f"{percentile(latencies, 0.99):>7.1f} {timed_errors:>7}"
        )


if __name__ == "__main__":
    main()
