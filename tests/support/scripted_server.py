"""A local HTTP server whose paths answer a scripted sequence (the last answer repeats)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedServer:
    def __init__(self, script: dict[str, list[tuple[int, str, bytes]]]) -> None:
        self.script = {path: list(answers) for path, answers in script.items()}
        self.requests: list[str] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                with lock:
                    server.requests.append(self.path)
                    answers = server.script.get(self.path, [(404, "text/plain", b"no")])
                    status, content_type, body = answers.pop(0) if len(answers) > 1 else answers[0]
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return f"http://{self.target}{path}"

    def __enter__(self) -> ScriptedServer:
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
