"""Alert notifications, delivered as jobs of the system itself (type ``alert_notify``, pool
``notify``), so retries with backoff and the dead-letter queue apply to them like to any job.

A webhook is a JSON POST signed with HMAC-SHA256: the header
``X-Leitstand-Signature: t=<unix time>,v1=<hex>`` where ``v1 = HMAC(secret, "<t>." + body)``; the
receiver recomputes it over the raw body and rejects old timestamps. E-mail goes through Django's
mail settings. A non-2xx answer, a timeout or a refused connection is a transient failure.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import httpx
from django.conf import settings
from django.core.mail import send_mail

from jobs.errors import PermanentError, TransientError
from workers.context import Done, JobContext

SIGNATURE_HEADER = "X-Leitstand-Signature"


class WebhookRefused(TransientError):
    """The receiver did not accept the delivery (non-2xx, timeout, connection refused)."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def notifications_for(alert, event) -> list[tuple[str, dict]]:
    """(idempotency key, payload) of each delivery an alert event needs, per its route's channels."""
    route = settings.LEITSTAND_ALERT_ROUTES.get(alert.route, {})
    message = {"alert_id": alert.pk, "event_id": event.pk, "event": event.kind, "rule": alert.rule,
               "scope": alert.scope, "state": alert.state, "route": alert.route, "diagnosis": alert.diagnosis,
               "value": alert.value, "threshold": alert.threshold, "runbook": f"/admin/runbooks/{alert.rule}/"}
    deliveries = []
    if route.get("webhook"):
        deliveries.append((f"alert-event-{event.pk}-webhook", {"channel": "webhook", "message": message}))
    if route.get("email"):
        deliveries.append((f"alert-event-{event.pk}-email", {"channel": "email", "message": message}))
    return deliveries


def handle(context: JobContext):
    channel, message = context.payload.get("channel"), context.payload.get("message")
    if channel not in ("webhook", "email") or not isinstance(message, dict):
        raise PermanentError('the payload is {"channel": "webhook"|"email", "message": {...}}')
    route = settings.LEITSTAND_ALERT_ROUTES.get(message.get("route", ""), {})
    if channel == "webhook":
        return _webhook(context, route, message)
    with context.step("email", to=route.get("email", [])):
        if not route.get("email"):
            raise PermanentError(f"route {message.get('route')!r} has no e-mail addresses any more")
        subject = f"[Leitstand] {message['event']}: {message['rule']} {message['scope']}".strip()
        send_mail(subject, f"{message['diagnosis']}\n\nRunbook: {message['runbook']}\n", None, route["email"])
    return Done(reason=f"e-mail sent to {len(route['email'])} addresses")


def _webhook(context: JobContext, route: dict, message: dict):
    url, secret = route.get("webhook"), route.get("secret", "")
    if not url:
        raise PermanentError(f"route {message.get('route')!r} has no webhook any more")
    if not secret:
        raise PermanentError(f"route {message.get('route')!r} has no signing secret")
    body = json.dumps(message, sort_keys=True, separators=(",", ":")).encode()
    timestamp = int(time.time())
    with context.step("webhook", url=url) as info:
        try:
            response = httpx.post(url, content=body, timeout=settings.LEITSTAND_NOTIFY["http_timeout_seconds"],
                                  headers={"Content-Type": "application/json", SIGNATURE_HEADER: sign(secret, timestamp, body),
                                           "User-Agent": "Leitstand-Alerts/1", "X-Leitstand-Delivery": str(context.job_id)})
        except httpx.HTTPError as exc:
            raise WebhookRefused(f"{type(exc).__name__} delivering to {url}: {exc}") from None
        info["status"] = response.status_code
        if not 200 <= response.status_code < 300:
            raise WebhookRefused(f"{url} answered {response.status_code}")
    return Done(reason=f"webhook delivered to {url} ({response.status_code})")
