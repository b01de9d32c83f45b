"""``manage.py db start|stop|status``: see and control the embedded PostgreSQL server.
``manage.py db grants``: grant the application and maintenance roles their privileges again, as the
owner (``LEITSTAND_DATABASE_OWNER_URL``), on the embedded server or the one ``DATABASE_URL`` names.
``manage.py db backup FILE`` / ``db restore FILE``: a whole-database dump (``pg_dump`` custom format,
as the owner) and its restore into an empty database (one transaction), then the grants."""

import os
import shutil
import subprocess

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Start, stop or show the embedded PostgreSQL server (used when DATABASE_URL is not set)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status", "grants", "backup", "restore"])
        parser.add_argument("file", nargs="?", help="the dump (backup, restore)")

    def handle(self, *args, action, file=None, **options):
        if action == "grants":
            return self._grants()
        if action in ("backup", "restore"):
            if not file:
                raise CommandError(f"db {action} needs a FILE")
            return self._backup(file) if action == "backup" else self._restore(file)
        if self._uses_external_database():
            if action == "status":
                self.stdout.write("DATABASE_URL is set: Leitstand uses that server, not the embedded one.")
                return
            raise CommandError(
                f"DATABASE_URL is set, so there is no embedded server to {action}; "
                "unset DATABASE_URL to use the embedded server."
            )
        from devtools import embedded_db  # the development server: imported only to start, stop or show it

        if action == "start":
            current = embedded_db.start()
            self.stdout.write(f"running  pid {current.pid}  data {current.pgdata}  url {current.database_url()}")
        elif action == "stop":
            stopped = embedded_db.stop()
            self.stdout.write("stopped" if stopped else f"not running (data {embedded_db.pgdata_path()})")
        else:
            current = embedded_db.status()
            if current.is_running:
                self.stdout.write(f"running  pid {current.pid}  data {current.pgdata}  url {current.database_url()}")
            elif current.is_initialized:
                self.stdout.write(f"stopped  data {current.pgdata}")
            else:
                self.stdout.write(f"not initialised  data {current.pgdata} (created on first start)")

    def _grants(self) -> None:
        from django.db import connection

        from config.db_roles import as_owner_connection, grants_apply

        with as_owner_connection():
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_user")
                user = cursor.fetchone()[0]
            granted = grants_apply(force=True)
        roles = ", ".join(settings.LEITSTAND_DB_ROLES.values())
        if not granted:
            raise CommandError(
                f"nothing granted: connected as {user}, which does not own the tables, or the roles {roles} "
                "do not exist (docs/operations.md, 'Database roles')"
            )
        self.stdout.write(f"granted as {user} to {roles}")

    def _owner_url(self) -> str:
        return settings.LEITSTAND_DATABASE_OWNER_URL or settings.DATABASE_URL

    def _program(self, name: str) -> str:
        """The client programs shipped with the embedded server (PostgreSQL 18: pg_dump refuses a
        server newer than itself, and dumps every older one), else those on PATH."""
        try:
            from devtools.embedded_db import client_program
        except ImportError:  # an installation without the development tools: PATH's
            return shutil.which(name) or name
        shipped = client_program(name)
        return shipped if os.path.exists(shipped) else (shutil.which(name) or name)

    def _run(self, arguments: list[str]) -> None:
        done = subprocess.run(arguments, capture_output=True, text=True)
        if done.returncode != 0:
            raise CommandError(f"{os.path.basename(arguments[0])} failed: {done.stderr.strip()[-2000:]}")

    def _backup(self, file: str) -> None:
        self._run([self._program("pg_dump"), "--format=custom", "--file", file, "--dbname", self._owner_url()])
        self.stdout.write(f"wrote {file} ({os.path.getsize(file):,} bytes)")

    def _restore(self, file: str) -> None:
        from django.db import connection

        from config.db_roles import as_owner_connection
        from jobs.models import Job

        with as_owner_connection(), connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [f"public.{Job._meta.db_table}"])
            if cursor.fetchone()[0]:
                raise CommandError("the database is not empty: restore into a fresh one (a new server or database)")
        self._run(
            [
                self._program("pg_restore"),
                "--exit-on-error",
                "--single-transaction",
                "--dbname",
                self._owner_url(),
                file,
            ]
        )
        self._grants()
        self.stdout.write(f"restored {file}")

    @staticmethod
    def _uses_external_database() -> bool:
        """DATABASE_URL names a server other than the embedded one (manage.py sets it to the embedded
        server's when it was not set: LEITSTAND_EMBEDDED_DB says so)."""
        return os.environ.get("LEITSTAND_EMBEDDED_DB") != "true"
