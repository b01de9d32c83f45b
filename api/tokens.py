"""API tokens: created with a secret shown once, stored as prefix + SHA-256, checked in constant time.
Each token acts for its client (``jobs.Client``); a client may hold several (the PHP core's read and
write tokens). Creating, rotating and revoking are audited by the console page that calls them."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction

from api.models import ApiToken
from jobs.clients import client_ensure, clients_require
from jobs.models import Client, LeitstandNow, database_now
from jobs.reads import composed
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


# A budget count is not a state change: as a statement of its own it commits without waiting for
# the disk (``synchronous_commit`` off for that statement's transaction, set by the statement itself —
# one round trip; a crash may forget the last milliseconds of counts, never a job), so the requests
# of one token, which all update one row, do not queue behind each other's flush. Inside a caller's
# transaction the setting would cover its state changes too: there ``%(relaxed)s`` is false and the
# count commits with them.
_RELAXED = "relaxed AS (SELECT CASE WHEN %(relaxed)s THEN set_config('synchronous_commit', 'off', true) END)"
# Every window of an earlier minute, whoever it counted: the tables hold about one minute of rows
# (an address that never returns leaves nothing behind).
_TIDY_SQL = {
    "requests": "DELETE FROM jobs_apiratewindow WHERE window_start < date_trunc('minute', leitstand_now())",
    "address": "DELETE FROM api_apiaddresswindow WHERE window_start < date_trunc('minute', leitstand_now())",
}

# One statement per request: the live token the prefix and the secret's hash name; with ``count``,
# also this request (and ``jobs`` submitted jobs when the token may write) added to the token's
# window of the current minute, and ``last_used_at`` written at most once a minute (every request of
# a token would otherwise write the same row). The hash is compared in the database: it is a SHA-256
# of the presented secret, so how long a comparison takes tells a guesser nothing of the stored one.
# Out of a caller's transaction the count commits without waiting for the disk (``_RELAXED``); a
# token found but not counted (``count`` false) writes nothing. The token's client comes with it
# (its ID and name: what a submission needs), through the engine's read of its clients.
_ADMIT_SQL = f"""
    WITH {_RELAXED}
    , live AS (
        SELECT t.*, c.name AS client_name, c.most_urgent_lane AS client_most_urgent_lane,
               c.trace_trusted AS client_trace_trusted, leitstand_now() AS now
          FROM jobs_apitoken t JOIN ({composed("client_keys")}) AS c ON c.id = t.client_id
         WHERE t.prefix = %(prefix)s AND t.secret_hash = %(hash)s AND t.revoked_at IS NULL
           AND (t.expires_at IS NULL OR t.expires_at > leitstand_now()))
    , counted AS (
        INSERT INTO jobs_apiratewindow AS w (token_id, window_start, requests, jobs)
        SELECT live.id, date_trunc('minute', live.now), 1,
               CASE WHEN live.scopes ? 'jobs:write' THEN %(jobs)s ELSE 0 END
          FROM live, relaxed WHERE %(count)s
        ON CONFLICT (token_id, window_start)
        DO UPDATE SET requests = w.requests + 1, jobs = w.jobs + EXCLUDED.jobs
        RETURNING w.requests, w.jobs,
                  extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now()) AS seconds_left)
    , used AS (
        UPDATE jobs_apitoken t SET last_used_at = live.now FROM live
         WHERE t.id = live.id AND %(count)s
           AND (live.last_used_at IS NULL OR live.last_used_at <= live.now - interval '1 minute')
        RETURNING t.id)
    SELECT live.*, counted.requests, counted.jobs, counted.seconds_left FROM live LEFT JOIN counted ON true"""
_TOKEN_FIELDS = tuple(field.attname for field in ApiToken._meta.concrete_fields)


@dataclass(frozen=True)
class Admission:
    """A live token and, when counted, the token's window of this minute: requests
    and jobs so far, this request's included, and the seconds until the window ends."""

    token: ApiToken
    requests: int = 0
    jobs: int = 0
    seconds_left: float = 0.0


def token_admit(presented: str, *, jobs: int = 0, count: bool = True) -> Admission | None:
    """The live token the presented string names, or None (malformed, unknown, wrong, revoked,
    expired); with ``count``, this request and its ``jobs`` counted in the token's window — one
    round trip. A job is counted only for a token with ``jobs:write``: a submission it may make."""
    from django.db import connection

    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return None
    relaxed = count and not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute(
            _ADMIT_SQL,
            {"prefix": parts[1], "hash": _hash(parts[2]), "jobs": jobs, "count": count, "relaxed": relaxed},
        )
        row = cursor.fetchone()
        if row is None:
            return None
        columns = [column.name for column in cursor.description]
        values = dict(zip(columns, row))
        values["scopes"] = json.loads(values["scopes"])  # jsonb comes as text (the ORM's converter's work)
        if count and values["requests"] == 1:  # the first count of this token's minute
            cursor.execute(_TIDY_SQL["requests"])
    token = ApiToken.from_db("default", _TOKEN_FIELDS, [values[field] for field in _TOKEN_FIELDS])
    token.client = Client.from_db(
        "default",
        ("id", "name", "most_urgent_lane", "trace_trusted"),
        (values["client_id"], values["client_name"], values["client_most_urgent_lane"], values["client_trace_trusted"]),
    )
    if not count:
        return Admission(token)
    return Admission(token, values["requests"], values["jobs"], max(float(values["seconds_left"]), 0.0))


def token_check(presented: str) -> ApiToken | None:
    """The live token the presented string names, or None; nothing is counted or written."""
    admission = token_admit(presented, count=False)
    return admission.token if admission else None


def token_trusts_trace(presented: str) -> bool:
    """Whether a request with this token joins the trace context it sends: a live token with
    ``jobs:all`` (the PHP core), or of a client an operator trusts (``Client.trace_trusted``). The
    token's check (``token_check``: one statement), nothing counted (the request's admission counts)."""
    token = token_check(presented)
    return token is not None and ("jobs:all" in token.scopes or token.client.trace_trusted)


def token_revoke(*, name: str, user=None) -> ApiToken:
    clients_require(user)
    updated = ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=LeitstandNow())
    if not updated:
        raise JobInputError("name", f"no live token named {name!r}")
    return ApiToken.objects.get(name=name)


_COUNT_SQL = {
    # One statement: add to the current minute's window and answer the new total and the seconds
    # left in the window. An address's first count of a minute tidies up older windows.
    "jobs": f"""WITH {_RELAXED}
        INSERT INTO jobs_apiratewindow AS w (token_id, window_start, requests, jobs)
        SELECT %(key)s, date_trunc('minute', leitstand_now()), 0, %(n)s FROM relaxed
        ON CONFLICT (token_id, window_start) DO UPDATE SET jobs = w.jobs + EXCLUDED.jobs
        RETURNING jobs, extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now())""",
    "address": f"""WITH {_RELAXED}
        INSERT INTO api_apiaddresswindow AS w (address, window_start, requests)
        SELECT %(key)s, date_trunc('minute', leitstand_now()), %(n)s FROM relaxed
        ON CONFLICT (address, window_start) DO UPDATE SET requests = w.requests + EXCLUDED.requests
        RETURNING requests, extract(epoch FROM w.window_start + interval '1 minute' - leitstand_now())""",
}


def _count(what: str, key, n: int) -> tuple[int, float]:
    """Count ``n`` in the current minute's window of ``key``; the total and the seconds left."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_COUNT_SQL[what], {"key": key, "n": n, "relaxed": not connection.in_atomic_block})
        count, left = cursor.fetchone()
        if count == n and what in _TIDY_SQL:  # the first count of a minute
            cursor.execute(_TIDY_SQL[what])
    return count, max(float(left), 0.0)


def jobs_count(token: ApiToken, jobs: int) -> tuple[int, float]:
    """The jobs this token submitted in the current minute, these included, and the seconds left."""
    return _count("jobs", token.pk, jobs)


def address_count(address: str) -> tuple[int, float]:
    """Requests from ``address`` without a valid token in the current minute, this one included."""
    return _count("address", address[:45], 1)
