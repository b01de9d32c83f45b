"""A local web site whose pages, headers, robots.txt and images are the attacks of a site that does
not want to be crawled. Each page is a table entry (path → status, headers, body), so a test names
the attack it serves next to what it expects Leitstand to record."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image


@dataclass
class Page:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


def png(colour=(200, 30, 30), size=(96, 96)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return buffer.getvalue()


def jpeg_with_scans(scans: int) -> bytes:
    """A small, valid progressive JPEG followed by ``scans`` extra start-of-scan markers, the shape of
    a scan bomb (each scan is a pass over every coefficient) without its decoding cost."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (10, 120, 200)).save(buffer, "JPEG", progressive=True)
    data = buffer.getvalue()
    return data[:-2] + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" * scans + data[-2:]


class HostileWeb:
    """``pages`` maps a request path (with its query) to a ``Page``; anything else is a 404.
    ``requests`` records every path asked for, with the User-Agent that asked."""

    def __init__(self) -> None:
        self.pages: dict[str, Page] = {"/robots.txt": Page(404, b"", "text/plain")}
        self.requests: list[tuple[str, str]] = []
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                web.requests.append((self.path, self.headers.get("User-Agent", "")))
                page = web.pages.get(self.path) or Page(404, b"not here", "text/plain")
                # Written raw: a hostile header is sent as it is, whatever http.server would check.
                head = [f"HTTP/1.1 {page.status} X".encode()]
                if page.content_type:
                    head.append(b"Content-Type: " + page.content_type.encode("latin-1"))
                head.append(f"Content-Length: {len(page.body)}".encode())
                head += [name.encode("latin-1") + b": " + value.encode("utf-8") for name, value in page.headers]
                self.wfile.write(b"\r\n".join(head) + b"\r\n\r\n" + page.body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return f"http://{self.target}{path}"

    def asked(self, path: str) -> bool:
        return any(asked == path for asked, _ in self.requests)

    def __enter__(self) -> HostileWeb:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
