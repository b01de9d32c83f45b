"""``manage.py db start|stop|status``: see and control the embedded PostgreSQL server.
``manage.py db grants``: grant the application and maintenance roles their privileges again, as the
owner (``LEITSTAND_DATABASE_OWNER_URL``), on the embedded server or the one ``DATABASE_URL`` names."""

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config import embedded_db


class Command(BaseCommand):
    help = "Start, stop or show the embedded PostgreSQL server (used when DATABASE_URL is not set)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status", "grants"])

    def handle(self, *args, action, **options):
        if action == "grants":
            return self._grants()
        if self._uses_external_database():
            if action == "status":
                self.stdout.write("DATABASE_URL is set: Leitstand uses that server, not the embedded one.")
                return
            raise CommandError(
                f"DATABASE_URL is set, so there is no embedded server to {action}; "
                "unset DATABASE_URL to use the embedded server."
            )
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

    @staticmethod
    def _uses_external_database() -> bool:
        return bool(os.environ.get("DATABASE_URL"))
