"""Alert notifications, delivered as jobs of the system itself (type ``alert_notify``, pool
``notify``), so retries with backoff and the dead-letter queue apply to them like to any job.

Each route (``alerts.models.Route``) has up to three channels: a webhook (signed like the API's
webhooks, ``workers.runtime.webhook``), e-mail (Django's mail settings) and Prometheus Alertmanager
(its v2 API). Every message names the component and scope, the first diagnosis, the route, its owner
and contacts, and carries absolute links (``LEITSTAND_PUBLIC_URL``) to the alert and its runbook. The
route is read again when the job runs: a channel removed in the meantime is a permanent error.

Alertmanager forgets an alert at its ``endsAt``: each firing alert is posted with
``endsAt`` = now + 3 × ``LEITSTAND_ALERTMANAGER_REPOST_SECONDS`` and re-posted every
``LEITSTAND_ALERTMANAGER_REPOST_SECONDS`` (``alertmanager_repost``), a resolved one once with its
resolution time, so Alertmanager resolves it at once.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

from django.core.mail import send_mail
from django.urls import reverse
from django.utils import timezone

from alerts import options
from alerts.alert_rules import rule_title
from alerts.models import Alert, ReceiptTest, Route
from alerts.receipts import confirm_link, receipt_token
from alerts.routes import public_url, route_named
from alerts.silences import ActiveSilences
from jobs.errors import JobError, PermanentError
from jobs.models import database_now
from workers.pipeline.http import destination_problem, notification_client
from workers.runtime.context import Done, JobContext
from workers.runtime.services import job_submit
from workers.runtime.webhook import WebhookRefused, post_signed, url_redacted

CHANNELS = ("webhook", "email", "alertmanager")
_SCOPE_KINDS = {
    "pool": "pool",
    "type": "job type",
    "source": "source",
    "host": "host",
    "route": "alert route",
    "batch": "batch",
    "rule": "business rule",
    "group": "dead-letter group",
}


def component(scope: str) -> str:
    """What the alert is about, in words: ``pool:crawl`` → "pool crawl"; no scope → all of Leitstand."""
    kind, _, name = scope.partition(":")
    if not name:
        return "Leitstand (every pool and type)"
    return f"{_SCOPE_KINDS.get(kind, kind)} {name}"


def alertname(rule: str) -> str:
    """The rule's name in Alertmanager and in ``deploy/prometheus/alerts.yml``: ``dlq_growth`` → ``LeitstandDlqGrowth``."""
    return "Leitstand" + "".join(part.capitalize() for part in rule.split("_"))


def message_for(alert: Alert, event_kind: str, *, title: str, event_id: int | None = None, comment: str = "") -> dict:
    """What every channel says about ``alert`` (fired, escalated, renotified, acknowledged, resolved)."""
    route = route_named(alert.route)
    owner = route.owner if route and route.owner_id else None
    contacts = [
        {"name": c.name, "email": c.email, "phone": c.phone, "role": c.role}
        for c in (owner.contacts.all() if owner else [])
    ]
    runbook = public_url(reverse("admin:runbook", args=[alert.rule]))
    link = public_url(reverse("admin:alerts_alert_change", args=[alert.pk]))
    who = f"owner {owner.name}" if owner else "no owner"
    if contacts:
        who += (
            " ("
            + ", ".join(filter(None, (c["name"] + (f" <{c['email']}>" if c["email"] else "") for c in contacts)))
            + ")"
        )
    text = (
        f"[{alert.severity.upper()}] {event_kind}: {title} — {component(alert.scope)}. {alert.diagnosis} "
        f"Route {alert.route}, {who}. Runbook: {runbook} · Alert: {link}"
    )
    return {
        "alert_id": alert.pk,
        "event_id": event_id,
        "event": event_kind,
        "rule": alert.rule,
        "alertname": alertname(alert.rule),
        "title": title,
        "severity": alert.severity,
        "component": component(alert.scope),
        "scope": alert.scope,
        "state": alert.state,
        "route": alert.route,
        "owner": owner.name if owner else "",
        "contacts": contacts,
        "diagnosis": alert.diagnosis,
        "value": alert.value,
        "threshold": alert.threshold,
        "fired_at": _iso(alert.fired_at),
        "resolved_at": _iso(alert.resolved_at),
        "comment": comment,
        "runbook": runbook,
        "url": link,
        "text": text,
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def deliver(message: dict, *, to: str, key: str, correlation_id: str) -> int:
    """Queue one delivery per channel of route ``to`` (idempotent per ``key`` and channel); how many."""
    route = route_named(to)
    channels = route.channels if route else []
    for channel in channels:
        payload = {"channel": channel, "route": to}
        payload.update({"alerts": [message]} if channel == "alertmanager" else {"message": message})
        job_submit(
            job_type="alert_notify",
            payload=payload,
            idempotency_key=f"{key}-{channel}",
            actor="alert-evaluator",
            correlation_id=correlation_id,
        )
    return len(channels)


def test_message(test: ReceiptTest) -> dict:
    """What a route's test says, with the way to confirm it: the console link and the API call."""
    token = receipt_token(test)
    link, api = confirm_link(token), public_url("/api/v1/alert-tests/confirm")
    route = test.route
    return {
        "event": "test",
        "route": route.name,
        "owner": route.owner.name if route.owner_id else "",
        "test_id": test.pk,
        "confirm_url": link,
        "confirm_api": {"method": "POST", "url": api, "json": {"token": token}},
        "confirm_by": test.confirm_by.isoformat(),
        "token": token,
        "text": (
            f"Test of the Leitstand alert route {route.name}: please confirm that it reached you by "
            f"{test.confirm_by:%Y-%m-%d %H:%M} UTC — open {link} (console login), or POST "
            f'{{"token": "<the token>"}} to {api} (scope alerts:confirm). Unconfirmed, route_unconfirmed fires.'
        ),
    }


def _test_as_alert(message: dict) -> dict:
    """A test in Alertmanager: an alert of its own (``LeitstandRouteTest``) that ends at its deadline."""
    return {
        "event": "test",
        "alertname": "LeitstandRouteTest",
        "rule": "route_test",
        "scope": f"route:{message['route']}",
        "severity": "ticket",
        "route": message["route"],
        "owner": message["owner"],
        "title": "Test of a Leitstand alert route",
        "text": message["text"],
        "runbook": message["confirm_url"],
        "url": message["confirm_url"],
        "ends_at": message["confirm_by"],
    }


def alertmanager_repost(*, every_seconds: float) -> int:
    """Post every firing or acknowledged, not silenced alert again to its route's Alertmanager, before
    the ``endsAt`` of the last post; one job per route and interval. How many routes."""
    slot = int(database_now().timestamp() // every_seconds)
    routes = {r.name: r for r in Route.objects.exclude(alertmanager_url="")}
    if not routes:
        return 0
    by_route: dict[str, list[dict]] = {}
    open_alerts = Alert.objects.filter(
        route__in=routes, state__in=(Alert.State.FIRING, Alert.State.ACKNOWLEDGED)
    ).order_by("pk")
    silences = ActiveSilences()
    for alert in open_alerts:
        if silences(alert):
            continue
        by_route.setdefault(alert.route, []).append(message_for(alert, "firing", title=rule_title(alert.rule)))
    for name, messages in by_route.items():
        job_submit(
            job_type="alert_notify",
            payload={"channel": "alertmanager", "route": name, "alerts": messages},
            idempotency_key=f"alertmanager-{name}-{slot}",
            actor="alert-evaluator",
            correlation_id=f"route-{name}",
        )
    return len(by_route)


# --- the handler ------------------------------------------------------------------------------


def handle(context: JobContext):
    payload = context.payload
    channel, to = payload.get("channel"), payload.get("route")
    if channel not in CHANNELS or not isinstance(to, str):
        raise PermanentError('the payload is {"channel": "webhook"|"email"|"alertmanager", "route": "…", …}')
    route = route_named(to)
    if route is None:
        raise PermanentError(f"route {to!r} does not exist any more")
    if "test_id" in payload:  # a route's test: the token is signed now, it is in no payload
        test_id = payload["test_id"]
        test = (
            ReceiptTest.objects.select_related("route", "route__owner").filter(pk=test_id).first()
            if isinstance(test_id, int)
            else None
        )
        if test is None or test.route_id != route.pk:
            raise PermanentError(f"test {payload['test_id']!r} of route {to!r} does not exist any more")
        message = test_message(test)
        payload = {**payload, "message": message, "alerts": [_test_as_alert(message)]}
    if channel == "alertmanager":
        alerts = payload.get("alerts")
        if not isinstance(alerts, list) or not all(isinstance(a, dict) for a in alerts):
            raise PermanentError('an alertmanager payload has "alerts": [{...}, ...]')
        return _alertmanager(context, route, alerts)
    message = payload.get("message")
    if not isinstance(message, dict):
        raise PermanentError('a webhook or e-mail payload has "message": {...}')
    if channel == "webhook":
        if not route.webhook_url:
            raise PermanentError(f"route {to!r} has no webhook any more")
        if not route.webhook_secret:
            raise PermanentError(f"route {to!r} has no signing secret")
        _destination_check(route.webhook_url)
        return post_signed(
            context, url=route.webhook_url, secret=route.webhook_secret, message=message, agent="Leitstand-Alerts/1"
        )
    with context.step("email", to=route.emails):
        if not route.emails:
            raise PermanentError(f"route {to!r} has no e-mail addresses any more")
        send_mail(_subject(message), _body(message), None, route.emails)
    return Done(reason=f"e-mail sent to {len(route.emails)} addresses")


def _subject(message: dict) -> str:
    if message.get("event") == "test":
        return f"[Leitstand] Test of alert route {message['route']}: please confirm receipt"
    severity = str(message.get("severity", "")).upper()
    return f"[Leitstand {severity}] {message['event']}: {message['rule']} — {message.get('component', '')}".strip()


def _body(message: dict) -> str:
    if message.get("event") == "test":
        # The token in the link's fragment does not survive a login on the way: it stands here too.
        return f"{message['text']}\n\nConfirm: {message['confirm_url']}\nToken: {message['token']}\n"
    contacts = "\n".join(
        f"  {c['name']}"
        + (f" <{c['email']}>" if c.get("email") else "")
        + (f", {c['phone']}" if c.get("phone") else "")
        for c in message.get("contacts", [])
    )
    return (
        f"{message['text']}\n\n"
        f"Component: {message.get('component', '')}\nDiagnosis: {message['diagnosis']}\n"
        f"Route: {message['route']} (owner: {message.get('owner') or 'none'})\n"
        + (f"Contacts:\n{contacts}\n" if contacts else "")
        + (f"Comment: {message['comment']}\n" if message.get("comment") else "")
        + f"\nRunbook: {message['runbook']}\nAlert: {message.get('url', '')}\n"
    )


def _destination_check(url: str) -> None:
    problem = destination_problem(url)
    if problem:
        raise PermanentError(f"{url_redacted(url)} is not a destination notifications may go to: {problem}")


_LABEL_SCOPE = re.compile(r"^(pool|type|source|host|route|batch)$")


def alertmanager_alert(message: dict, now: datetime) -> dict:
    """One alert in Alertmanager's v2 form: labels rule, scope, severity, route (and the scope's own
    label, e.g. ``pool``, as the Prometheus rules have it), annotations with the diagnosis and runbook."""
    kind, _, name = str(message.get("scope", "")).partition(":")
    labels = {
        "alertname": message["alertname"],
        "rule": message["rule"],
        "scope": message.get("scope", ""),
        "severity": message.get("severity", ""),
        "route": message["route"],
        "source_system": "leitstand",
    }
    if name and _LABEL_SCOPE.match(kind):
        labels[kind] = name
    if message.get("owner"):
        labels["owner"] = message["owner"]
    repost = options.current().alertmanager_repost_seconds
    if message.get("ends_at"):
        ends = message["ends_at"]
    elif message.get("state") == Alert.State.RESOLVED:
        # Alertmanager compares with its own clock: never an end later than this host's now.
        resolved = datetime.fromisoformat(message["resolved_at"]) if message.get("resolved_at") else now
        ends = min(resolved, now).isoformat()
    else:
        ends = (now + timedelta(seconds=3 * repost)).isoformat()
    alert = {
        "labels": {key: str(value) for key, value in labels.items() if value != ""},
        "annotations": {
            "summary": f"{message.get('title', '')} — {message.get('component', '')}".strip(" —"),
            "description": message.get("text", ""),
            "diagnosis": message.get("diagnosis", message.get("text", "")),
            "runbook_url": message.get("runbook", ""),
        },
        "endsAt": ends,
        "generatorURL": message.get("url", ""),
    }
    if message.get("fired_at"):
        alert["startsAt"] = message["fired_at"]
    return alert


def _alertmanager(context: JobContext, route: Route, alerts: list[dict]):
    if not route.alertmanager_url:
        raise PermanentError(f"route {route.name!r} has no Alertmanager any more")
    url = route.alertmanager_url.rstrip("/") + "/api/v2/alerts"
    _destination_check(url)
    shown = url_redacted(url)
    now = timezone.now()  # Alertmanager's time is the wall clock (database time may differ)
    body = [alertmanager_alert(message, now) for message in alerts]
    with context.step("alertmanager", url=shown, alerts=len(body)) as info:
        # Through the safe client, pinned to the address its guard checked (a DNS answer that changed
        # since _destination_check cannot redirect the POST).
        client = notification_client(options.current().http_timeout_seconds)
        try:
            status = client.post(url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        except JobError as exc:  # refused (permanent) or no answer (transient): the client's classes
            exc.args = (str(exc).replace(url, shown),)
            raise
        info["status"] = status
        if status == 400:  # its answer is not shown: the receiver's text is not ours to publish
            raise PermanentError(f"{shown} refused the alerts as invalid (400)")
        if not 200 <= status < 300:
            raise WebhookRefused(f"{shown} answered {status}")
    return Done(reason=f"{len(body)} alerts posted to {shown}")
