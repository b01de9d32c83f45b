"""Bind the console's user to every log line a request writes (``jobs.logs``): a line about a bulk
retry or a refused form names who did it. The name is read only when a line is written, so a request
that logs nothing costs no look-up of its session's user.

With traces recorded (jobs/tracing.py), a console action (any request but GET and HEAD) is a server
span, so the jobs it creates (a replay, a run of a source) start a trace of their own; the
console's reads and live parts, polled every few seconds, are not traced."""

from __future__ import annotations

from jobs import logs, tracing


class UserLogMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        with logs.bound(user=lambda: _username(request)):
            if request.method in ("GET", "HEAD") or request.path.startswith("/api/") or not tracing.enabled():
                return self.get_response(request)
            with tracing.server_span(request) as span:
                response = self.get_response(request)
                tracing.served(span, request, response.status_code)
                return response


def _username(request) -> str:
    user = getattr(request, "user", None)
    return user.get_username() if user is not None and user.is_authenticated else ""
