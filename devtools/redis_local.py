"""Debian's redis-server on a Unix socket of its own, for the wake-up broker's tests and bench
(``LEITSTAND_WAKEUP_REDIS_URL``): nothing kept on disk, reachable only by this machine's user (and
root) through a private directory; ``kill`` ends it as a crash would, ``start`` brings it back on
the same socket.

This module must not import Django.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def program() -> str | None:
    return shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


class LocalRedis:
    def __init__(self) -> None:
        if program() is None:
            raise RuntimeError("redis-server is not installed: apt-get install redis-server")
        self.directory = Path(tempfile.mkdtemp(prefix="leitstand-redis-", dir="/tmp"))  # 0700; short for a socket
        self.socket = self.directory / "redis.sock"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}?db=0"

    def start(self) -> LocalRedis:
        self.process = subprocess.Popen(
            [program(), "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(str(self.socket))
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start at {self.socket}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """kill -9: Redis and the wake-ups it held are gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.socket.unlink(missing_ok=True)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)
