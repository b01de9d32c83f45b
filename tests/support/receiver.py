"""A local webhook receiver: records every POST (headers, raw body) and answers a set status."""

import hashlib
import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, status: int) -> None:
        self.status, self.deliveries = status, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.deliveries.append((dict(self.headers), body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.target}/hook"

    @property
    def target(self) -> str:
        """``host:port``, to allow-list (``LEITSTAND_NOTIFY_ALLOWED_TARGETS``): a loopback receiver is
        refused otherwise."""
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def signature_valid(secret: str, header: str, body: bytes) -> bool:
    """What a receiver does: recompute ``v1`` over ``"<t>." + raw body`` and compare in constant time."""
    parts = dict(part.split("=", 1) for part in header.split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(parts["v1"], expected)
