"""Debian's PgBouncer in transaction mode, started by the cluster (``devtools/cluster.py``), the tests
and the benches: its configuration in one place, and a local one in front of a database on this
machine (``local``).

This module must not import Django.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit


def program() -> str | None:
    return shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)


def configure(
    directory: Path,
    *,
    database: str,
    server: str,
    server_port: int,
    listen: str,
    port: int,
    users: dict[str, str],
    auth_type: str,
    pool_size: int,
) -> Path:
    """Write ``pgbouncer.ini`` and its user list (``users``: name → password) into ``directory``;
    the ini's path. Transaction pooling, nothing kept in a session. ``listen`` is an address, or a
    directory for its Unix socket alone (then it listens on no network address).
    ``database`` ``"*"`` passes every database name through (the test suite creates its own)."""
    _write(directory / "users.txt", "".join(f'"{user}" "{password}"\n' for user, password in users.items()))
    on_socket = listen.startswith("/")
    _write(
        directory / "pgbouncer.ini",
        f"""[databases]
{database} = host={server} port={server_port}{"" if database == "*" else f" dbname={database}"}
[pgbouncer]
listen_addr = {"" if on_socket else listen}
listen_port = {port}
unix_socket_dir = {listen if on_socket else ""}
auth_type = {auth_type}
auth_file = {directory / "users.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {directory / "pgbouncer.log"}
""",
    )
    return directory / "pgbouncer.ini"


def _write(path: Path, text: str) -> None:
    """Root writes into a directory PgBouncer's user may own: never through a link planted there."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def command(ini: Path, *, user: str | None = None) -> list[str]:
    """PgBouncer refuses to run as root: then it runs as ``user``, who must own ``ini``'s directory."""
    found = program()
    if found is None:
        raise RuntimeError("PgBouncer is not installed: apt-get install pgbouncer")
    return [found, *(["-u", user] if user and os.geteuid() == 0 else []), str(ini)]


def give_to(directory: Path, user: str) -> None:
    """As root: ``directory`` and all in it to ``user`` (PgBouncer's, PostgreSQL's own user); links
    are changed themselves, never followed."""
    if os.geteuid() != 0:
        return
    account = pwd.getpwnam(user)
    for item in [directory, *directory.rglob("*")]:
        os.chown(item, account.pw_uid, account.pw_gid, follow_symlinks=False)


def wait_listening(host: str, port: int, process: subprocess.Popen | None, log: Path, timeout: float = 20) -> None:
    """Until PgBouncer answers at ``host`` (an address, or its socket directory) and ``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if host.startswith("/"):
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(f"{host}/.s.PGSQL.{port}")
            else:
                socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"pgbouncer does not answer at {host}:{port}: {tail}") from None
            time.sleep(0.05)


@dataclass(frozen=True)
class Local:
    directory: Path  # its Unix socket's, private to PgBouncer's user (and root)

    @property
    def socket(self) -> Path:
        return self.directory / f".s.PGSQL.{LOCAL_PORT}"

    def through(self, url: str) -> str:
        """The same ``postgresql://`` URL, through this PgBouncer."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rsplit("@", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{userinfo}@{quote(str(self.directory), safe='')}"))


# Only the socket's name: each local PgBouncer has a directory of its own and no network port.
LOCAL_PORT = 5432


@contextmanager
def local(
    database_url: str, *, users: list[str] = (), pool_size: int = 4, any_database: bool = False
) -> Iterator[Local]:
    """PgBouncer in front of the database of ``database_url`` (or, with ``any_database``, of every
    database on its server) — a server on this machine that trusts its Unix socket, as the embedded
    one does — for its user and ``users``, at most ``pool_size`` server connections per user and
    database; stopped and removed after the block. Like the embedded server it trusts its clients,
    so it listens only on a Unix socket in a directory no other user may enter."""
    parts = urlsplit(database_url)
    users = [unquote(parts.username or ""), *users]
    host, _, server_port = parts.netloc.rsplit("@", 1)[-1].partition(":")
    server = unquote(host)  # a socket directory travels percent-encoded
    directory = Path(tempfile.mkdtemp(prefix="leitstand-pgbouncer-", dir="/tmp"))  # 0700; short for a socket path
    ini = configure(
        directory,
        database="*" if any_database else parts.path.lstrip("/"),
        server=server,
        server_port=int(server_port or 5432),
        listen=str(directory),
        port=LOCAL_PORT,
        users=dict.fromkeys(users, ""),
        auth_type="trust",
        pool_size=pool_size,
    )
    owner = pwd.getpwuid(Path(server).stat().st_uid).pw_name if server.startswith("/") else "nobody"
    give_to(directory, owner)
    process = subprocess.Popen(command(ini, user=owner), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_listening(str(directory), LOCAL_PORT, process, directory / "pgbouncer.log")
        yield Local(directory)
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
