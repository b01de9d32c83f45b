"""Alert notifications, delivered as jobs of the system itself (type ``alert_notify``, pool
``notify``), so retries with backoff and the dead-letter queue apply to them like to any job.

A webhook is signed like the API's webhooks (``workers.runtime.webhook``). E-mail goes through Django's mail
settings.
"""

from __future__ import annotations

from django.conf import settings
from django.core.mail import send_mail

from jobs.errors import PermanentError
from workers.runtime.context import Done, JobContext
from workers.runtime.webhook import post_signed


def notifications_for(alert, event) -> list[tuple[str, dict]]:
    """(idempotency key, payload) of each delivery an alert event needs, per its route's channels."""
    route = settings.LEITSTAND_ALERT_ROUTES.get(alert.route, {})
    message = {
        "alert_id": alert.pk,
        "event_id": event.pk,
        "event": event.kind,
        "rule": alert.rule,
        "scope": alert.scope,
        "state": alert.state,
        "route": alert.route,
        "diagnosis": alert.diagnosis,
        "value": alert.value,
        "threshold": alert.threshold,
        "runbook": f"/admin/runbooks/{alert.rule}/",
    }
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
    return post_signed(context, url=url, secret=secret, message=message, agent="Leitstand-Alerts/1")
