"""Refuse, with a 400, console requests whose path, query or form carries a NUL character.

PostgreSQL text can neither store nor compare NUL, so a filter value like ``?q=%00`` reached the
database as an error (a 500 for the operator, an unclassified exception in the log). The API checks
every field itself (problem+json 422s); this guard covers the console's list filters, searches and
forms, where Django's admin hands query values to the database as they come.
"""

from __future__ import annotations

from django.http import HttpResponseBadRequest


class InputGuardMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith("/api/") and _carries_nul(request):
            return HttpResponseBadRequest(
                "The request carries a NUL character (in its path, query or form): no value may contain one.",
                content_type="text/plain; charset=utf-8",
            )
        return self.get_response(request)


def _carries_nul(request) -> bool:
    if "\x00" in request.path:
        return True
    fields = [request.GET]
    if request.method == "POST" and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        fields.append(request.POST)
    return any("\x00" in key or "\x00" in value for data in fields for key, values in data.lists() for value in values)
