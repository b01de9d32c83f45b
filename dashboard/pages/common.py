"""What every console page shares: the permission check, the actor its actions are recorded under,
and the frame (navigation, title) the console's templates expect."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse


def require(request, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"this page needs the permission {permission}")


def actor(request) -> str:
    return f"user:{request.user.get_username()}"


def render(request, template: str, title: str, context: dict, *, status: int = 200) -> TemplateResponse:
    """``template`` in the console's frame (the site's navigation and header) with ``title``."""
    return TemplateResponse(
        request, template, {**admin.site.each_context(request), "title": title, **context}, status=status
    )
