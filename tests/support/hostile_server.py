"""A local HTTP server with hostile and ordinary routes, recording every request it sees."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
GZIP_BOMB = gzip.compress(b"\x00" * (50 * 2**20), compresslevel=9)  # 50 MiB inflated, ~50 KiB sent


class HostileServer:
    def __init__(self, address: str = "127.0.0.1") -> None:
        self.address = address
        self.requests: list[str] = []
        self.hosts: list[str] = []  # the Host header of every request
        self.header_names: list[set[str]] = []  # the names of every request's headers, lower case
        # What /robots.txt answers: (status, body, seconds to wait before answering).
        self.robots: tuple[int, bytes, float] = (404, b"", 0.0)
        # /slow: how many requests were in flight at once, at most, and when each began.
        self.in_flight = 0
        self.max_in_flight = 0
        self.slow_started: list[float] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                server.hosts.append(self.headers.get("Host", ""))
                server.header_names.append({name.lower() for name in self.headers.keys()})
                route = self.path.split("?")[0]
                name = route.strip("/").split("/")[0].replace("-", "_").replace(".", "_")
                getattr(self, "route_" + name, self.route_missing)()

            def send(self, status, body=b"", content_type="text/plain", extra=()):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in extra:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def route_missing(self):
                self.send(404, b"not here")

            def route_robots_txt(self):
                status, body, wait = server.robots
                time.sleep(wait)
                try:
                    self.send(status, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def route_slow(self):
                with lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.slow_started.append(time.monotonic())
                time.sleep(0.1)
                with lock:
                    server.in_flight -= 1
                self.send(200, b"slow")

            def route_hostile_page(self):
                # NUL bytes, script links, a metadata-address image, an overlong URL, an unknown charset.
                body = (
                    b"<html><body>\x00<a href='javascript:alert(1)'>x</a><a href='/ok\x00'>ok</a>"
                    b"<img src='http://169.254.169.254/latest/meta-data/x.png'>"
                    b"<img srcset='/png 1x'><img srcset='/fake-png 2x'><img src='/" + b"a" * 3000 + b"'>"
                    b"<a href='mailto:x@example.org'>m</a></body></html>"
                )
                self.send(200, body, "text/html; charset=x-no-such-charset")

            def route_ok(self):
                self.send(200, b"hello")

            def route_png(self):
                self.send(200, PNG, "image/png")

            def route_fake_png(self):
                self.send(200, b"<html>not an image</html>", "image/png")

            def route_redirect(self):
                # /redirect?to=URL
                self.send(302, extra=[("Location", self.path.split("to=", 1)[1])])

            def route_loop(self):
                self.send(302, extra=[("Location", "/loop")])

            def route_drip_headers(self):
                # The status line, then one header byte at a time, each just inside any read timeout.
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(1000):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(0.3)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def route_drip(self):
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                try:
                    for _ in range(1000):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(0.3)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def route_big(self):
                self.send_response(200)
                self.send_header("Content-Length", str(1024 * 2**20))
                self.end_headers()
                chunk = b"\x00" * 2**16
                try:
                    for _ in range(1024 * 16):
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def route_bomb(self):
                self.send(200, GZIP_BOMB, extra=[("Content-Encoding", "gzip")])

            def route_lying_length(self):
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"only ten b")
                self.close_connection = True

            def route_huge_headers(self):
                self.send_response(200)
                for n in range(200):
                    self.send_header(f"X-Filler-{n}", "y" * 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

        server_class = (
            type("Server", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
            if ":" in address
            else ThreadingHTTPServer
        )
        self.httpd = server_class((address, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def target(self) -> str:
        return f"{self.address}:{self.port}"

    def url(self, path: str) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}{path}"

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
