"""Helpers for tests that reach the test database from other processes, move database time, or
need the owner role; and the switch that runs the code under test as the application role."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from datetime import timedelta
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
    """Moves ``leitstand_now()`` forward for this test's database client.

    Lease and schedule decisions read database time only, so a test moves that instead of sleeping.
    The offset is a row of the test database's clock table for this client's ``application_name``
    (``MOVABLE_CLOCK``), not a session setting, so it holds through PgBouncer's transaction pooling
    too; inside a test's transaction it leaves with the rollback, otherwise ``reset`` removes it.
    """

    def __init__(self) -> None:
        self.offset_seconds = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("database time only moves forward")
        self.offset_seconds += seconds
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO leitstand_test_clock (client, shift) VALUES (current_setting('application_name'), %s)"
                " ON CONFLICT (client) DO UPDATE SET shift = EXCLUDED.shift",
                [timedelta(seconds=self.offset_seconds)],
            )

    def reset(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM leitstand_test_clock WHERE client = current_setting('application_name')")
        self.offset_seconds = 0.0

    def now(self):
        with connection.cursor() as cursor:
            cursor.execute("SELECT leitstand_now()")
            return cursor.fetchone()[0]


# --- the roles ------------------------------------------------------------------------------------

# The clock the test database gets (as the owner, once): database time shifted by the offset a test
# stored for its client (``DatabaseClock``). Production's ``leitstand_now()`` has no offset (jobs
# migration 0023). The test process names itself (``HARNESS_CLIENT``), so the processes it starts,
# which connect as "leitstand", keep real time, as they would with a session setting.
HARNESS_CLIENT = "leitstand-test-harness"
MOVABLE_CLOCK = f"""
CREATE TABLE IF NOT EXISTS leitstand_test_clock (client text PRIMARY KEY, shift interval NOT NULL);
GRANT SELECT, INSERT, UPDATE, DELETE ON leitstand_test_clock TO {django_settings.LEITSTAND_DB_ROLES["application"]};
GRANT SELECT ON leitstand_test_clock TO {django_settings.LEITSTAND_DB_ROLES["maintenance"]};
GRANT SELECT ON leitstand_test_clock TO {django_settings.LEITSTAND_DB_ROLES["tasks"]};
CREATE OR REPLACE FUNCTION leitstand_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp() + coalesce(
        (SELECT shift FROM public.leitstand_test_clock WHERE client = current_setting('application_name')), '0')
$$;
"""

# Through PgBouncer's transaction pooling (``LEITSTAND_TEST_PGBOUNCER``) a ``SET ROLE`` would stay
# on whichever server connection ran it; the test process then logs in as the role it acts as.
POOLED = bool(os.environ.get("LEITSTAND_PGBOUNCER"))
OWNER = connection.settings_dict["USER"]  # the test process's login: the owner
connection.settings_dict["OPTIONS"]["application_name"] = HARNESS_CLIENT


class ApplicationRole:
    """While on, every connection of this process acts as the application role (``SET ROLE``, or
    through PgBouncer the login itself): the code under test has production's privileges. The
    harness turns it off to create, flush and drop the test database, which only the owner may;
    ``as_owner()`` does so for a test's own setup."""

    active = False

    @classmethod
    def role(cls) -> str:
        return django_settings.LEITSTAND_DB_ROLES["application"]

    @classmethod
    def on(cls) -> None:
        cls.active = True
        cls._act_as(cls.role())

    @classmethod
    def off(cls) -> None:
        cls.active = False
        cls._act_as(OWNER)

    @classmethod
    def _act_as(cls, role: str) -> None:
        if POOLED:
            if connection.settings_dict["USER"] != role:
                if connection.in_atomic_block:
                    raise RuntimeError("through PgBouncer the test process changes its role only between transactions")
                connection.close()
                connection.settings_dict["USER"] = role
        elif connection.connection is not None and connection.is_usable():
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE" if role == OWNER else f"SET ROLE {role}")

    @classmethod
    def on_connect(cls, sender, connection, **kwargs) -> None:
        if cls.active and not POOLED:
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
        for role in (roles["application"], roles["maintenance"], roles["tasks"]):
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
