"""API tokens: created with a secret shown once, stored as prefix + SHA-256, checked in constant time.
Each token acts for its client (``jobs.Client``); a client may hold several (the PHP core's read and
write tokens). Creating, rotating and revoking are audited by the console page that calls them."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.db import IntegrityError, transaction

from api.models import ApiToken
from jobs.clients import client_ensure, clients_require
from jobs.models import LeitstandNow, database_now
from jobs.services import JobInputError

# ``jobs:all``: see and act on every job, batch and plan, also those of other clients and of no client
# (crawls started from the console or a command); without it a token sees its own client's only.
# ``alerts:confirm``: confirm receipt of an alert route's test notification (an automated receiver).
SCOPES = ("jobs:read", "jobs:write", "jobs:all", "jobs:synthetic", "reviews:write", "alerts:confirm")
TOKEN_PREFIX = "lst"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_create(
    *,
    name: str,
    scopes: list[str],
    client: str = "",
    expires_days: float | None = None,
    actor: str = "command",
    user=None,
) -> tuple[ApiToken, str]:
    """Create a token of ``client`` (created if new; the token's own name when empty); returns it and
    the clear text (``lst_<prefix>_<secret>``), which is never stored."""
    clients_require(user)
    if not isinstance(name, str) or not name or len(name) > 100 or not name.isprintable():
        raise JobInputError("name", "must be 1-100 printable characters")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise JobInputError("scopes", f"unknown or missing scopes {unknown}; choose from {', '.join(SCOPES)}")
    if expires_days is not None and not 0 < expires_days <= 3660:
        raise JobInputError("expires_days", "must be more than 0 and at most 3660 days")
    with transaction.atomic():
        if ApiToken.objects.filter(name=name).exists():
            raise JobInputError("name", f"a token named {name!r} exists; revoke it or choose another name")
        owner, _ = client_ensure(name=client or name, actor=actor, user=user)
        prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        expires = database_now() + timedelta(days=expires_days) if expires_days else None
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    name=name,
                    client=owner,
                    prefix=prefix,
                    secret_hash=_hash(secret),
                    scopes=sorted(set(scopes)),
                    expires_at=expires,
                )
        except IntegrityError:  # created by someone else between the check and the insert
            raise JobInputError("name", f"a token named {name!r} exists; revoke it or choose another name") from None
    return token, f"{TOKEN_PREFIX}_{prefix}_{secret}"


def token_rotate(*, name: str, user=None) -> tuple[ApiToken, str]:
    """A new secret for a live token (same name, client, scopes and expiry); the old one stops working
    at once. Returns the token and its new clear text, shown once."""
    clients_require(user)
    prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    updated = ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(
        prefix=prefix, secret_hash=_hash(secret)
    )
    if not updated:
        raise JobInputError("name", f"no live token named {name!r}")
    return ApiToken.objects.get(name=name), f"{TOKEN_PREFIX}_{prefix}_{secret}"


def token_check(presented: str) -> ApiToken | None:
    """The live token the presented string names, or None (malformed, unknown, wrong, revoked, expired)."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return None
    token = (
        ApiToken.objects.select_related("client")
        .annotate(now=LeitstandNow())  # database time in the same query: one round trip per request
        .filter(prefix=parts[1], revoked_at__isnull=True)
        .first()
    )
    if token is None or not hmac.compare_digest(token.secret_hash, _hash(parts[2])):
        return None
    now = token.now
    if token.expires_at is not None and token.expires_at <= now:
        return None
    # At most once a minute: every request of a token would otherwise write the same row.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() >= 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=LeitstandNow())
    return token


def token_revoke(*, name: str, user=None) -> ApiToken:
    clients_require(user)
    updated = ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=LeitstandNow())
    if not updated:
        raise JobInputError("name", f"no live token named {name!r}")
    return ApiToken.objects.get(name=name)


_COUNT_SQL = {
    # One statement per request: add to the current minute's window and answer the new total and
    # the seconds left in the window. A key's first count of a minute tidies up older windows.
    "requests": """{relaxed}
        INSERT INTO jobs_apiratewindow AS w (token_id, window_start, requests, jobs)
        SELECT %(key)s, date_trunc('minute', leitstand_now()), %(n)s, 0 {from_relaxed}
        ON CONFLICT (token_id, window_start) DO UPDATE SET requests = w.requests + EXCLUDED.requests
        RETURNING requests, extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now())""",
    "jobs": """{relaxed}
        INSERT INTO jobs_apiratewindow AS w (token_id, window_start, requests, jobs)
        SELECT %(key)s, date_trunc('minute', leitstand_now()), 0, %(n)s {from_relaxed}
        ON CONFLICT (token_id, window_start) DO UPDATE SET jobs = w.jobs + EXCLUDED.jobs
        RETURNING jobs, extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now())""",
    "address": """{relaxed}
        INSERT INTO api_apiaddresswindow AS w (address, window_start, requests)
        SELECT %(key)s, date_trunc('minute', leitstand_now()), %(n)s {from_relaxed}
        ON CONFLICT (address, window_start) DO UPDATE SET requests = w.requests + EXCLUDED.requests
        RETURNING requests, extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now())""",
}
# Every window of an earlier minute, whoever it counted: the tables hold about one minute of rows
# (an address that never returns leaves nothing behind).
_TIDY_SQL = {
    "requests": "DELETE FROM jobs_apiratewindow WHERE window_start < date_trunc('minute', leitstand_now())",
    "address": "DELETE FROM api_apiaddresswindow WHERE window_start < date_trunc('minute', leitstand_now())",
}


# A budget count is not a state change: as a statement of its own it commits without waiting for
# the disk (``synchronous_commit`` off for that statement's transaction, set by the statement itself —
# one round trip; a crash may forget the last milliseconds of counts, never a job), so the requests
# of one token, which all update one row, do not queue behind each other's flush. Inside a caller's
# transaction the setting would cover its state changes too: there the count commits with them.
_RELAXED = {
    "relaxed": "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true))",
    "from_relaxed": "FROM relaxed",
}
_DURABLE = {"relaxed": "", "from_relaxed": ""}


def _count(what: str, key, n: int) -> tuple[int, float]:
    """Count ``n`` in the current minute's window of ``key``; the total and the seconds left."""
    from django.db import connection

    commit = _DURABLE if connection.in_atomic_block else _RELAXED
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_SQL[what].format(**commit), {"key": key, "n": n})
        count, left = cursor.fetchone()
        if count == n and what in _TIDY_SQL:  # the first count of a minute
            cursor.execute(_TIDY_SQL[what])
    return count, max(float(left), 0.0)


def rate_count(token: ApiToken) -> tuple[int, float]:
    """This request's number in the token's current minute, and the seconds until the window ends."""
    return _count("requests", token.pk, 1)


def jobs_count(token: ApiToken, jobs: int) -> tuple[int, float]:
    """The jobs this token submitted in the current minute, these included, and the seconds left."""
    return _count("jobs", token.pk, jobs)


def address_count(address: str) -> tuple[int, float]:
    """Requests from ``address`` without a valid token in the current minute, this one included."""
    return _count("address", address[:45], 1)
