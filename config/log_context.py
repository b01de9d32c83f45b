"""Bind the console's user to every log line a request writes (``jobs.logs``): a line about a bulk
retry or a refused form names who did it. The name is read only when a line is written, so a request
that logs nothing costs no look-up of its session's user."""

from __future__ import annotations

from jobs import logs


class UserLogMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        with logs.bound(user=lambda: _username(request)):
            return self.get_response(request)


def _username(request) -> str:
    user = getattr(request, "user", None)
    return user.get_username() if user is not None and user.is_authenticated else ""
