"""A real PgBouncer (Debian's package) in transaction mode in front of the test database, for tests
that show the processes work through it (issue 19)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dj_database_url

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Bouncer:
    port: int

    def through(self, url: str) -> str:
        parts = urlsplit(url)
        userinfo = parts.netloc.rsplit("@", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{self.port}"))


@contextmanager
def pgbouncer(database_url: str, *, users: list[str], pool_size: int = 4):
    """Start PgBouncer (``pool_mode = transaction``, at most ``pool_size`` server connections per user
    and database) for the database of ``database_url``; yields it (``through`` turns a URL of that
    database into the same URL through PgBouncer)."""
    if not os.path.exists(PGBOUNCER):
        raise RuntimeError("these tests need Debian's pgbouncer: apt-get install pgbouncer")
    target = dj_database_url.parse(database_url)
    host = target["HOST"] or target.get("OPTIONS", {}).get("host", "")
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="leitstand-pgbouncer-"))  # not under pytest's 0700 tmp
    directory.chmod(0o755)
    (directory / "users.txt").write_text("".join(f'"{user}" ""\n' for user in users))
    (directory / "pgbouncer.ini").write_text(
        f"""[databases]
{target["NAME"]} = host={host} port={target["PORT"] or 5432} dbname={target["NAME"]}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {directory / "pgbouncer.log"}
"""
    )
    command = [PGBOUNCER, "-q", str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root; the embedded server's own user serves
        owner = Path(host).stat().st_uid if host.startswith("/") else 65534
        os.chown(directory, owner, -1)
        for name in ("users.txt", "pgbouncer.ini"):
            os.chown(directory / name, owner, -1)
        import pwd

        command[1:1] = ["-u", pwd.getpwuid(owner).pw_name]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (directory / "pgbouncer.log").read_text() if (directory / "pgbouncer.log").exists() else ""
                    raise RuntimeError(f"pgbouncer did not start: {log[-2000:]}") from None
                time.sleep(0.05)

        yield Bouncer(port)
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
