"""Helpers for tests that reach the test database from other processes or move database time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dj_database_url
from django.db import connection

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """DATABASE_URL of the database pytest-django created (test_<name>), for child processes."""
    settings = connection.settings_dict
    parsed = dj_database_url.parse(os.environ["DATABASE_URL"])
    host = parsed["HOST"] or parsed.get("OPTIONS", {}).get("host", "")
    from urllib.parse import quote

    auth = quote(settings["USER"] or "", safe="")
    if settings.get("PASSWORD"):
        auth += ":" + quote(settings["PASSWORD"], safe="")
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    return f"postgresql://{auth}@{quote(host, safe='')}{port}/{settings['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env.update(extra)
    return env


def python_process(module: str, *args: str, env: dict[str, str], **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=PROJECT_ROOT, env=env, **popen)


class DatabaseClock:
    """Moves ``leitstand_now()`` forward for this test's database session.

    Lease and schedule decisions read database time only, so a test moves that instead of sleeping.
    """

    def __init__(self) -> None:
        self.offset_seconds = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("database time only moves forward")
        self.offset_seconds += seconds
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('leitstand.clock_offset', %s, false)", [f"{self.offset_seconds} seconds"])

    def reset(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('leitstand.clock_offset', '', false)")
        self.offset_seconds = 0.0

    def now(self):
        with connection.cursor() as cursor:
            cursor.execute("SELECT leitstand_now()")
            return cursor.fetchone()[0]
