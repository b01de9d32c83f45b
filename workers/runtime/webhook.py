"""Signed webhook deliveries, and the handler of ``api_webhook`` jobs (events for the PHP core).

A webhook is a JSON POST signed with HMAC-SHA256, in two forms (``LEITSTAND_WEBHOOK_SIGNATURES``:
both by default, or either alone):

- Leitstand's own: ``X-Leitstand-Signature: t=<unix time>,v1=<hex>`` where
  ``v1 = HMAC(secret, "<t>." + body)``;
- Standard Webhooks (standardwebhooks.com): ``webhook-id`` (the event's ID, the same on every retry),
  ``webhook-timestamp`` (unix time) and ``webhook-signature: v1,<base64>`` where
  ``<base64> = HMAC(secret, "<id>.<timestamp>." + body)`` — the key is the secret's UTF-8 bytes, so a
  Standard Webhooks library takes ``"whsec_" + base64(secret)``.

The receiver recomputes either over the raw body and rejects old timestamps. A non-2xx answer, a
timeout or a refused connection is a transient failure (retried with backoff, then the dead-letter
queue).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from jobs import options as engine_options
from jobs import tracing
from jobs.correlation import header_safe
from jobs.errors import JobError, PermanentError, TransientError
from jobs.models import Client
from workers.runtime import options
from workers.runtime.context import Done, JobContext

SIGNATURE_HEADER = "X-Leitstand-Signature"


class WebhookRefused(TransientError):
    """The receiver did not accept the delivery (non-2xx, timeout, connection refused)."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def standard_headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of a delivery: its ID, its time, and ``v1,<base64 HMAC-SHA256>``
    over ``"<id>.<timestamp>." + body`` with the secret's UTF-8 bytes as the key."""
    digest = hmac.new(secret.encode(), f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
    }


def signature_headers(secret: str, message_id: str, body: bytes) -> dict[str, str]:
    """The signatures ``LEITSTAND_WEBHOOK_SIGNATURES`` asks for, signed now."""
    form, now = engine_options.current().webhook.signatures, int(time.time())
    headers = {SIGNATURE_HEADER: sign(secret, now, body)} if form in ("both", "leitstand") else {}
    if form in ("both", "standard"):
        headers.update(standard_headers(secret, message_id, now, body))
    return headers


# The guarded POST: the safe client's, with the address guard and the connection pinned to the
# address it checked (workers.pipeline registers it at start-up; the runtime cannot import the
# pipeline above it). (url, body, headers, timeout, propagate) -> status; raises the client's error
# classes. ``propagate``: the request carries its trace context (jobs/tracing.py).
_guarded_post: Callable[..., int] | None = None


def guarded_post_register(post: Callable[..., int]) -> None:
    global _guarded_post
    _guarded_post = post


def post_signed(
    context: JobContext,
    *,
    url: str,
    secret: str,
    message: dict,
    agent: str,
    headers: dict[str, str] | None = None,
    guarded: bool = True,
    propagate: bool = False,
    message_id: str = "",
) -> Done:
    """POST ``message`` as compact JSON, signed, as the step ``webhook``. ``message_id``: what the
    receiver deduplicates on (``webhook-id``; '': the delivery job's ID). ``guarded``: through the
    address guard, the POST pinned to the checked address (receivers people set in the console: a
    client's webhook, a route's); False only for the operators' own environment setting.
    ``propagate``: the receiver joins the trace (``traceparent``/``tracestate`` of the request)."""
    body = json.dumps(message, sort_keys=True, separators=(",", ":")).encode()
    all_headers = {
        "Content-Type": "application/json",
        "User-Agent": agent,
        **signature_headers(secret, message_id or str(context.job_id), body),
        "X-Leitstand-Delivery": str(context.job_id),
        **(headers or {}),
    }
    shown = url_redacted(url)  # step data and reasons are read by viewers and read tokens
    timeout = options.current().notify.http_timeout_seconds
    with context.step("webhook", url=shown) as info:
        if guarded:
            if _guarded_post is None:
                raise PermanentError(
                    "no guarded HTTP client is registered: a receiver set by people is never posted to unguarded"
                )
            try:
                status = _guarded_post(url, body, all_headers, timeout, propagate)
            except JobError as exc:  # refused (permanent) or no answer (transient): the client's classes
                exc.args = (str(exc).replace(url, shown),)
                raise
        else:
            try:
                parts = urlsplit(url)
                host, port = parts.hostname or "", parts.port
            except ValueError:  # a malformed port: httpx refuses it below
                host, port = "", None
            with tracing.client_span("POST", host, port) as span:
                try:
                    sent = {**all_headers, **(tracing.headers() if propagate else {})}
                    status = httpx.post(url, content=body, headers=sent, timeout=timeout).status_code
                except httpx.HTTPError as exc:
                    raise WebhookRefused(
                        f"{type(exc).__name__} delivering to {shown}: {str(exc).replace(url, shown)}"
                    ) from None
                tracing.answered(span, status)
        info["status"] = status
        if not 200 <= status < 300:
            raise WebhookRefused(f"{shown} answered {status}")
    return Done(reason=f"webhook delivered to {shown} ({status})")


def url_redacted(url: str) -> str:
    """A receiver's URL as people may see it: scheme and host (with port) only. Its path, query and
    user information may carry credentials (a token in the path, a key in the query)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(a malformed URL)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}/…"


def handle_api_webhook(context: JobContext):
    event = context.payload.get("event")
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not isinstance(event.get("type"), str):
        raise PermanentError('the payload is {"event": {"id": "evt_…", "type": "…", …}}')
    client_name = context.payload.get("client")
    url, secret = _receiver(client_name)
    # The delivery is created in the trace of the job its event is about, and its POST carries it
    # (W3C trace context): the PHP core's receiver sees the webhook in the trace of the request that
    # submitted the job (a retried delivery's in a trace of its own, linked back: jobs/tracing.py).
    return post_signed(
        context,
        url=url,
        secret=secret,
        message=event,
        agent="Leitstand-Webhooks/1",
        guarded=client_name is not None,  # a client's own webhook, set in the console
        propagate=True,
        message_id=event["id"],  # the same on every retry of the delivery: receivers deduplicate on it
        headers={
            "X-Leitstand-Event-Id": event["id"],
            "X-Leitstand-Event-Type": event["type"],
            "X-Correlation-ID": header_safe(context.correlation_id),
            **({"X-Leitstand-Client": header_safe(event["client"])} if event.get("client") else {}),
        },
    )


def _receiver(client_name) -> tuple[str, str]:
    """Where an event goes, and the secret that signs it: its client's own webhook, or the global one."""
    if client_name is not None:
        client = Client.objects.filter(name=client_name).first() if isinstance(client_name, str) else None
        if client is None or not client.webhook_url or not client.webhook_secret:
            raise PermanentError(f"client {client_name!r} no longer has a webhook of its own")
        return client.webhook_url, client.webhook_secret
    hook = engine_options.current().webhook
    if not hook.url or not hook.secret:
        raise PermanentError("LEITSTAND_WEBHOOK_URL and LEITSTAND_WEBHOOK_SECRET are no longer both set")
    return hook.url, hook.secret
