#!/usr/bin/env python
"""Django's command-line utility for Leitstand."""

import os
import sys

# Commands that manage the embedded server themselves, or never touch the database.
_NO_AUTOSTART = {"db", "help", "--help", "-h", "version", "--version"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if not os.environ.get("DATABASE_URL") and command not in _NO_AUTOSTART:
        # Nothing to install by hand: the project's own PostgreSQL starts on first use and keeps
        # running for the next command (``manage.py db stop`` stops it).
        from devtools import embedded_db

        embedded_db.start()

    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
