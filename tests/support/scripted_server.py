"""A local HTTP server whose paths answer a scripted sequence (the last answer repeats) to
LeitstandBot. Any other agent (a recheck's second opinion) is told what the crawler was told last,
unless ``for_browsers`` scripts its own answer for the path (a site that cloaks)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedServer:
    def __init__(
        self,
        script: dict[str, list[tuple[int, str, bytes]]],
        for_browsers: dict[str, tuple[int, str, bytes]] | None = None,
    ) -> None:
        self.script = {path: list(answers) for path, answers in script.items()}
        self.for_browsers = dict(for_browsers or {})
        self.told: dict[str, tuple[int, str, bytes]] = {}  # what LeitstandBot was answered last
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
                    if "LeitstandBot" in self.headers.get("User-Agent", ""):
                        answer = answers.pop(0) if len(answers) > 1 else answers[0]
                        server.told[self.path] = answer
                    else:
                        answer = server.for_browsers.get(self.path) or server.told.get(self.path) or answers[0]
                    status, content_type, body = answer
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
