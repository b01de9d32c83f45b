#!/usr/bin/env python
"""Django's command-line utility for Leitstand."""

import os
import sys

# Commands that manage the embedded server themselves, or never touch the database.
_NO_AUTOSTART = {"db", "help", "--help", "-h", "version", "--version"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if not os.environ.get("DATABASE_URL"):
        # The development path: nothing to install by hand. The project's own PostgreSQL starts on
        # first use and keeps running for the next command (``manage.py db stop`` stops it); its URLs
        # go into the environment, where the settings (and the processes this one starts) read them.
        from devtools import embedded_db

        current = embedded_db.start() if command not in _NO_AUTOSTART else embedded_db.status()
        os.environ.update(embedded_db.environment(current))

    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
