"""API tokens: created with a secret shown once, stored as prefix + SHA-256, checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from api.models import ApiToken
from jobs.models import LeitstandNow, database_now
from jobs.services import JobInputError

SCOPES = ("jobs:read", "jobs:write", "jobs:synthetic", "reviews:write")
TOKEN_PREFIX = "lst"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_create(*, name: str, scopes: list[str], expires_days: float | None = None) -> tuple[ApiToken, str]:
    """Create a token; returns it and the clear text (``lst_<prefix>_<secret>``), which is never stored."""
    if not name or len(name) > 100:
        raise JobInputError("name", "must be 1-100 characters")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise JobInputError("scopes", f"unknown or missing scopes {unknown}; choose from {', '.join(SCOPES)}")
    if ApiToken.objects.filter(name=name).exists():
        raise JobInputError("name", f"a token named {name!r} exists; revoke it or choose another name")
    prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    expires = database_now() + timedelta(days=expires_days) if expires_days else None
    token = ApiToken.objects.create(
        name=name, prefix=prefix, secret_hash=_hash(secret), scopes=sorted(set(scopes)), expires_at=expires
    )
    return token, f"{TOKEN_PREFIX}_{prefix}_{secret}"


def token_check(presented: str) -> ApiToken | None:
    """The live token the presented string names, or None (malformed, unknown, wrong, revoked, expired)."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return None
    token = ApiToken.objects.filter(prefix=parts[1], revoked_at__isnull=True).first()
    if token is None or not hmac.compare_digest(token.secret_hash, _hash(parts[2])):
        return None
    now = database_now()
    if token.expires_at is not None and token.expires_at <= now:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=LeitstandNow())
    return token


def token_revoke(*, name: str) -> ApiToken:
    updated = ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=LeitstandNow())
    if not updated:
        raise JobInputError("name", f"no live token named {name!r}")
    return ApiToken.objects.get(name=name)


_RATE_SQL = """
-- One statement per request: count it in the token's current minute and answer the count and the
-- seconds left in the window. Old windows are removed now and then by the same statement's caller.
INSERT INTO jobs_apiratewindow AS w (token_id, window_start, requests)
VALUES (%(token)s, date_trunc('minute', leitstand_now()), 1)
ON CONFLICT (token_id, window_start) DO UPDATE SET requests = w.requests + 1
RETURNING requests, extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now())
"""


def rate_count(token: ApiToken) -> tuple[int, float]:
    """This request's number in the token's current minute, and the seconds until the window ends."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_RATE_SQL, {"token": token.pk})
        count, left = cursor.fetchone()
        if count == 1:  # the first request of a minute tidies up this token's old windows
            cursor.execute(
                "DELETE FROM jobs_apiratewindow WHERE token_id = %s AND "
                "window_start < date_trunc('minute', leitstand_now())",
                [token.pk],
            )
    return count, max(float(left), 0.0)
