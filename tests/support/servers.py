"""Servers the tests and benchmarks start as processes of their own (Alertmanager, gunicorn,
runserver): a free loopback port, and waiting until the server answers."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_answers(url: str, process: subprocess.Popen, *, timeout: float) -> None:
    """Poll ``url`` until it answers 200; fail with the process's output when it exits or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            output = process.stdout or process.stderr
            raise AssertionError(f"{url} did not answer: {output.read().decode()[-3000:] if output else process.args}")
        time.sleep(0.1)


def production_server(env: dict[str, str]) -> subprocess.Popen:
    """``scripts/serve`` (gunicorn with config/gunicorn_conf.py) with ``env``, its output captured, in a
    session of its own (SIGTERM to it stops its workers too)."""
    from tests.support.db import PROJECT_ROOT

    return subprocess.Popen(
        [str(PROJECT_ROOT / "scripts" / "serve")],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
