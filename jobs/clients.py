"""API clients: the owners of what they submit, and where their events go.

A client is created with its first token (``manage.py create_api_token --client NAME``, or the
console's *Clients* page); its own webhook (URL and a generated signing secret, shown once) replaces
the global one for the events of its jobs and batches. Tokens are the API's (``api.tokens``).
"""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied
from django.db import transaction

from jobs.models import MANAGE_CLIENTS_PERMISSION, Client
from jobs.services import JobInputError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,99}$")


def clients_require(user) -> None:
    """Creating clients and tokens, rotating and revoking them: a console user needs the permission."""
    if user is not None and not user.has_perm(MANAGE_CLIENTS_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to manage API clients and tokens")


def client_ensure(*, name: str, actor: str, user=None) -> tuple[Client, bool]:
    """The client of this name, created if it does not exist yet; True when created."""
    clients_require(user)
    existing = Client.objects.filter(name=name).first() if isinstance(name, str) else None
    if existing is not None:  # a client migrated from a token keeps whatever name it had
        return existing, False
    if not isinstance(name, str) or not _NAME.match(name):
        raise JobInputError(
            "client",
            "must be 1-100 characters: letters, digits, space, '.', '_', '@', '-', starting with one of the first two",
        )
    return Client.objects.get_or_create(name=name, defaults={"created_by": actor[:255]})


def client_open_jobs_set(*, client_id: int, bound: int | None, actor: str, user=None) -> Client:
    """Set how many open jobs the client may have before its submissions are answered 429 (1 …
    10,000,000); None: the installation's ``LEITSTAND_API_CLIENT_OPEN_JOBS``."""
    clients_require(user)
    if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= 10_000_000):
        raise JobInputError("max_open_jobs", "must be a whole number from 1 to 10,000,000, or empty for the default")
    with transaction.atomic():
        client = Client.objects.select_for_update().filter(pk=client_id).first()
        if client is None:
            raise JobInputError("client", f"no client {client_id}")
        client.max_open_jobs = bound
        client.save(update_fields=["max_open_jobs"])
    return client


def client_webhook_set(*, client_id: int, url: str, actor: str, user=None) -> tuple[Client, str]:
    """Give the client its own webhook at ``url`` with a new signing secret (returned once, stored to
    sign); an empty ``url`` sends its events to the global webhook, ``none`` nowhere (the operator's
    explicit choices: a client nobody chose a receiver for gets no webhooks)."""
    clients_require(user)
    url = (url or "").strip()
    to_global = not url
    if url.lower() == "none":
        url = ""
    elif url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 500:
            raise JobInputError("webhook_url", "must be an http(s) URL with a host, at most 500 characters")
    secret = secrets.token_urlsafe(32) if url else ""
    with transaction.atomic():
        client = Client.objects.select_for_update().filter(pk=client_id).first()
        if client is None:
            raise JobInputError("client", f"no client {client_id}")
        client.webhook_url, client.webhook_secret, client.uses_global_webhook = url, secret, to_global
        client.save(update_fields=["webhook_url", "webhook_secret", "uses_global_webhook"])
    return client, secret


def client_trace_trust_set(*, client_id: int, trusted: bool, user=None) -> Client:
    """Trust (or stop trusting) the trace context the client's requests send: a trusted client's jobs
    join the trace it names; any other starts a new trace linked to it (docs/api.md, "Trace
    context"). Trust a client whose traces are yours (an internal service), never a partner."""
    clients_require(user)
    if not isinstance(trusted, bool):
        raise JobInputError("trace_trusted", "must be true or false")
    if not Client.objects.filter(pk=client_id).update(trace_trusted=trusted):
        raise JobInputError("client", f"no client {client_id}")
    return Client.objects.get(pk=client_id)


def client_lanes_set(*, client_id: int, most_urgent_lane: int, user=None) -> Client:
    """The most urgent lane (0-9) the client's submissions and moves may use: 5, the default, keeps it
    from getting ahead of other clients' normal work; grant 0 only to a client whose urgency you trust
    (the PHP core). Jobs already in a lane stay where they are."""
    clients_require(user)
    lane = most_urgent_lane
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane <= 9:
        raise JobInputError("most_urgent_lane", "must be a lane from 0 (the most urgent) to 9")
    if not Client.objects.filter(pk=client_id).update(most_urgent_lane=lane):
        raise JobInputError("client", f"no client {client_id}")
    return Client.objects.get(pk=client_id)
