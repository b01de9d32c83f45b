"""The production web server (scripts/serve: gunicorn with config/gunicorn_conf.py) on a free
loopback port: health and readiness for a load balancer, static files from the application
(WhiteNoise, collected into STATIC_ROOT as a deploy does), the console's login page, the API with a
token — and a graceful stop on SIGTERM; with ``LEITSTAND_LOG_FORMAT=json`` every line it writes, its
own and the application's, is one JSON object."""

import json
import signal
import subprocess
import sys

import httpx
import pytest

from api.tokens import token_create
from tests.support.db import PROJECT_ROOT, child_env
from tests.support.servers import free_port, production_server, wait_until_answers

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_the_production_server_serves_the_console_the_api_and_its_static_files(tmp_path):
    port = free_port()
    static_root = tmp_path / "static"
    env = child_env(
        LEITSTAND_STATIC_ROOT=str(static_root),
        LEITSTAND_DEBUG="false",
        LEITSTAND_ALLOWED_HOSTS="127.0.0.1",
        LEITSTAND_WEB_BIND=f"127.0.0.1:{port}",
        LEITSTAND_WEB_WORKERS="2",
        LEITSTAND_LOG_FORMAT="json",
    )
    checked = subprocess.run(
        [str(PROJECT_ROOT / "scripts" / "serve"), "--check-config"], cwd=PROJECT_ROOT, env=env, capture_output=True
    )
    assert checked.returncode == 0, checked.stderr.decode()[-2000:]
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "--verbosity", "0"],
        cwd=PROJECT_ROOT,
        env=env,
        check=True,
    )
    server = production_server(env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(f"{base}/healthz", server, timeout=30)
        assert httpx.get(f"{base}/readyz", headers={"Host": "10.1.2.3"}).json()["status"] == "ready"
        css = httpx.get(f"{base}/static/dashboard/console.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert "max-age" in css.headers["cache-control"], "WhiteNoise sets caching headers"
        login = httpx.get(f"{base}/admin/login/")
        assert login.status_code == 200 and "Content-Security-Policy" in login.headers
        _, secret = token_create(name="web", scopes=["jobs:read", "jobs:write", "jobs:synthetic"], client="php-core")
        listed = httpx.get(f"{base}/api/v1/jobs", headers={"Authorization": f"Bearer {secret}"})
        assert listed.status_code == 200 and listed.json()["items"] == []
        created = httpx.post(
            f"{base}/api/v1/jobs",
            json={"type": "synthetic", "payload": {}, "idempotency_key": "web-1"},
            headers={"Authorization": f"Bearer {secret}", "X-Correlation-ID": "php-request-5"},
        )
        assert created.status_code == 201
        assert httpx.get(f"{base}/api/v1/jobs").status_code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=40)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert code == 0, "gunicorn stops gracefully on SIGTERM"
    lines = [json.loads(line) for line in server.stdout.read().decode().splitlines()]  # each line one object
    assert any(line["logger"] == "gunicorn.error" and "Booting worker" in line["message"] for line in lines)
    assert any(line["logger"] == "gunicorn.access" and "GET /healthz" in line["message"] for line in lines)
    (submitted,) = [line for line in lines if "created by token web" in line["message"]]
    assert (submitted["client"], submitted["token"], submitted["correlation_id"]) == (
        "php-core",
        "web",
        "php-request-5",
    )
