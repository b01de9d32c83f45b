"""``manage.py db start|stop|status``: see and control the embedded PostgreSQL server."""

import os

from django.core.management.base import BaseCommand, CommandError

from config import embedded_db


class Command(BaseCommand):
    help = "Start, stop or show the embedded PostgreSQL server (used when DATABASE_URL is not set)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status"])

    def handle(self, *args, action, **options):
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

    @staticmethod
    def _uses_external_database() -> bool:
        return bool(os.environ.get("DATABASE_URL"))
