"""Debian's PgBouncer in transaction mode, started by the cluster (``config/cluster.py``), the tests
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
from urllib.parse import unquote, urlsplit, urlunsplit


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
    the ini's path. Transaction pooling, nothing kept in a session, no Unix socket of its own."""
    (directory / "users.txt").touch(mode=0o600)
    (directory / "users.txt").write_text("".join(f'"{user}" "{password}"\n' for user, password in users.items()))
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        f"""[databases]
{database} = host={server} port={server_port} dbname={database}
[pgbouncer]
listen_addr = {listen}
listen_port = {port}
unix_socket_dir =
auth_type = {auth_type}
auth_file = {directory / "users.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {directory / "pgbouncer.log"}
"""
    )
    return ini


def command(ini: Path, *, user: str | None = None) -> list[str]:
    """PgBouncer refuses to run as root: then it runs as ``user``, who must own ``ini``'s directory."""
    found = program()
    if found is None:
        raise RuntimeError("PgBouncer is not installed: apt-get install pgbouncer")
    return [found, *(["-u", user] if user and os.geteuid() == 0 else []), str(ini)]


def give_to(directory: Path, user: str) -> None:
    """As root: ``directory`` and all in it to ``user`` (PgBouncer's, PostgreSQL's own user)."""
    if os.geteuid() != 0:
        return
    account = pwd.getpwnam(user)
    for item in [directory, *directory.rglob("*")]:
        os.chown(item, account.pw_uid, account.pw_gid)


def wait_listening(host: str, port: int, process: subprocess.Popen | None, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"pgbouncer does not answer at {host}:{port}: {tail}") from None
            time.sleep(0.05)


@dataclass(frozen=True)
class Local:
    port: int

    def through(self, url: str) -> str:
        """The same ``postgresql://`` URL, through this PgBouncer."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rsplit("@", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{self.port}"))


@contextmanager
def local(database_url: str, *, users: list[str] = (), pool_size: int = 4) -> Iterator[Local]:
    """PgBouncer on 127.0.0.1 in front of the database of ``database_url`` (a server on this machine
    that trusts its Unix socket, as the embedded one does) for its user and ``users``, at most
    ``pool_size`` server connections per user; stopped and removed after the block."""
    parts = urlsplit(database_url)
    users = [unquote(parts.username or ""), *users]
    host, _, server_port = parts.netloc.rsplit("@", 1)[-1].partition(":")
    server = unquote(host)  # a socket directory travels percent-encoded
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    directory = Path(tempfile.mkdtemp(prefix="leitstand-pgbouncer-"))  # not under a private 0700 tree
    directory.chmod(0o755)
    ini = configure(
        directory,
        database=parts.path.lstrip("/"),
        server=server,
        server_port=int(server_port or 5432),
        listen="127.0.0.1",
        port=port,
        users=dict.fromkeys(users, ""),
        auth_type="trust",
        pool_size=pool_size,
    )
    owner = pwd.getpwuid(Path(server).stat().st_uid).pw_name if server.startswith("/") else "nobody"
    give_to(directory, owner)
    process = subprocess.Popen(command(ini, user=owner), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_listening("127.0.0.1", port, process, directory / "pgbouncer.log")
        yield Local(port)
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
