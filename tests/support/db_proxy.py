"""A TCP proxy in front of the test database's Unix socket that a test can cut and restore: the
database "goes away" for the processes that connect through it, while the test itself (and every
other test) keeps its own connection."""

from __future__ import annotations

import os
import selectors
import socket
import threading

from django.db import connection


def database_socket() -> str:
    """The Unix socket of the database the tests use (the embedded server listens on a socket only)."""
    settings = connection.settings_dict
    directory = settings["HOST"] or settings.get("OPTIONS", {}).get("host", "")
    return os.path.join(directory, f".s.PGSQL.{settings.get('PORT') or 5432}")


class DatabaseProxy:
    def __init__(self, target: str | None = None) -> None:
        self.target = target or database_socket()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.is_cut = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database_url: str) -> str:
        """``database_url`` (of the socket) with this proxy as its host."""
        from urllib.parse import urlsplit

        parts = urlsplit(database_url)
        user = parts.netloc.rsplit("@", 1)[0]
        return parts._replace(netloc=f"{user}@127.0.0.1:{self.port}").geturl()

    def cut(self) -> None:
        """Every connection through the proxy is closed, and new ones are refused, until ``restore``."""
        self.is_cut.set()
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for end in pair:
                end.close()

    def restore(self) -> None:
        self.is_cut.clear()

    def close(self) -> None:
        self.closed.set()
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.is_cut.is_set():
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        try:
            selector.register(a, selectors.EVENT_READ, b)
            selector.register(b, selectors.EVENT_READ, a)
            while True:
                for key, _ in selector.select(timeout=1):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            selector.close()
            a.close()
            b.close()
