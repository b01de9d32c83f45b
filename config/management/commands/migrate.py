"""``manage.py migrate`` as the owner role: the application's role owns nothing and cannot change the
schema, so migrations connect with ``LEITSTAND_DATABASE_OWNER_URL`` (the embedded server's owner by
default) and, after a migration that changed something, grant the application and maintenance roles
their privileges (``config/db_roles.py``). Without an owner URL it migrates as ``DATABASE_URL``."""

from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import DEFAULT_DB_ALIAS

from config.db_roles import as_owner_connection


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " Connects as the owner role (LEITSTAND_DATABASE_OWNER_URL)."

    def handle(self, *args, **options):
        if options["database"] != DEFAULT_DB_ALIAS:
            return super().handle(*args, **options)
        with as_owner_connection():
            return super().handle(*args, **options)
