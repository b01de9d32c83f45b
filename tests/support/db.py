"""Helpers for tests that reach the test database from other processes, move database time, or
need the owner role; and the switch that runs the code under test as the application role."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import dj_database_url
from django.conf import settings as django_settings
from django.db import connection
from django.db.backends.signals import connection_created

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_database_url(*, user: str | None = None, password: str | None = None) -> str:
    """DATABASE_URL of the database pytest-django created (test_<name>), for child processes: as the
    application role (as in production), or as ``user``. Over the embedded server's socket a role
    logs in without a password; a system server needs ``LEITSTAND_TEST_APPLICATION_PASSWORD``."""
    settings = connection.settings_dict
    parsed = dj_database_url.parse(os.environ["DATABASE_URL"])
    host = parsed["HOST"] or parsed.get("OPTIONS", {}).get("host", "")
    from urllib.parse import quote

    if user is None:
        user = django_settings.LEITSTAND_DB_ROLES["application"]
        password = os.environ.get("LEITSTAND_TEST_APPLICATION_PASSWORD", "")
    auth = quote(user, safe="")
    if password:
        auth += ":" + quote(password, safe="")
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    return f"postgresql://{auth}@{quote(host, safe='')}{port}/{settings['NAME']}"


def maintenance_database_url() -> str:
    """The test database as the maintenance role (the retention sweep's purges)."""
    return test_database_url(user=django_settings.LEITSTAND_DB_ROLES["maintenance"])


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["LEITSTAND_DATABASE_MAINTENANCE_URL"] = maintenance_database_url()
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


# --- the roles ------------------------------------------------------------------------------------

# The clock the test database gets (as the owner, once): database time shifted by the session's
# ``leitstand.clock_offset``. Production's ``leitstand_now()`` has no offset (jobs migration 0023).
MOVABLE_CLOCK = """
CREATE OR REPLACE FUNCTION leitstand_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp()
        + coalesce(nullif(current_setting('leitstand.clock_offset', true), ''), '0')::interval
$$;
"""


class ApplicationRole:
    """While on, every connection of this process acts as the application role (``SET ROLE``): the
    code under test has production's privileges. The harness turns it off to create, flush and drop
    the test database, which only the owner may; ``as_owner()`` does so for a test's own setup."""

    active = False

    @classmethod
    def role(cls) -> str:
        return django_settings.LEITSTAND_DB_ROLES["application"]

    @classmethod
    def on(cls) -> None:
        cls.active = True
        if connection.connection is not None:
            with connection.cursor() as cursor:
                cursor.execute(f"SET ROLE {cls.role()}")

    @classmethod
    def off(cls) -> None:
        cls.active = False
        if connection.connection is not None and connection.is_usable():
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE")

    @classmethod
    def on_connect(cls, sender, connection, **kwargs) -> None:
        if cls.active:
            with connection.cursor() as cursor:
                cursor.execute(f"SET ROLE {cls.role()}")


connection_created.connect(ApplicationRole.on_connect, dispatch_uid="leitstand-test-application-role")


@contextmanager
def as_owner():
    """Run a test's setup that changes the schema (migrating back and forth, dropping a trigger) as
    the owner, then act as the application again."""
    was = ApplicationRole.active
    ApplicationRole.off()
    try:
        yield
    finally:
        if was:
            ApplicationRole.on()


def roles_ensure() -> None:
    """The application and maintenance roles on the test server (the embedded one has them; on a
    system server the test user needs CREATEROLE, or an administrator creates them)."""
    roles = django_settings.LEITSTAND_DB_ROLES
    with connection.cursor() as cursor:
        for role in (roles["application"], roles["maintenance"]):
            cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
            if cursor.fetchone() is None:
                try:
                    cursor.execute(f"CREATE ROLE {role} LOGIN")
                except Exception as refused:
                    raise RuntimeError(
                        f"the test database needs the role {role} (docs/operations.md, 'Database roles'); "
                        f"creating it failed: {refused}"
                    ) from None
            cursor.execute(
                "SELECT pg_has_role(current_user, %s, 'MEMBER')", [role]
            )  # the test user acts as the role (SET ROLE)
            if not cursor.fetchone()[0]:
                cursor.execute(f"GRANT {role} TO current_user")


def migrate_to(targets=None) -> None:
    """Migrate the test database to ``targets`` (every leaf when None) as the owner, grant the roles
    again (tables a migration recreates come back without the application's privileges) and put the
    suite's movable clock back (migrating forward installs production's)."""
    from django.contrib.contenttypes.models import ContentType
    from django.db.migrations.executor import MigrationExecutor

    from config.db_roles import grants_apply

    with as_owner():
        executor = MigrationExecutor(connection)
        executor.migrate(targets or executor.loader.graph.leaf_nodes())
        grants_apply(force=True)
        with connection.cursor() as cursor:
            cursor.execute(MOVABLE_CLOCK)
    ContentType.objects.clear_cache()
