"""Authentication of API clients: ``Authorization: Bearer <token>``; a missing, unknown, revoked or
expired token → 401, a missing scope → 403, over the token's rate → 429."""

from __future__ import annotations

from django.conf import settings
from ninja.errors import HttpError
from ninja.security import HttpBearer

from api.errors import RateLimited
from api.tokens import rate_count, token_check


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        checked = token_check(token)
        if checked is not None:
            count, left = rate_count(checked)
            if count > settings.LEITSTAND_API_RATE_PER_MINUTE:
                raise RateLimited(left)
        return checked


def require(request, scope: str) -> None:
    if scope not in request.auth.scopes:
        raise HttpError(403, f"this token lacks the scope {scope}")
