"""Alert routes as records: who owns them, and proof that they still reach someone.

Routes, their owners and contacts are rows (``Route``, ``Owner``, ``Contact``) that operators edit
in the console. ``routes_ensure`` creates every route a rule, the fallback or
``LEITSTAND_ALERT_ROUTES`` names and the database does not have yet, from that setting (owner,
contacts, channels, times); a route that exists is never overwritten: the console's edits win.

**Tested receipt.** Every route with a test interval gets a test notification on that schedule
(``receipt_tests_send``, a sweep of the control process), and an operator can send one now. The
test carries a confirmation token — the test's ID signed with the project's secret key (Django's
signing, its own salt) — so a confirmation proves the message reached a receiver: a person opens the
link (console, login required, one POST) or an automated receiver posts the token to the API. The
token exists only in the delivered message: the delivery job's payload names the test, and the
handler signs the token as it sends (job payloads are readable by viewers and read tokens). A token
confirms once; a test not confirmed by its ``confirm_by`` fires ``route_unconfirmed``
(``dashboard/operations/alerts.py``) to the route's fallback.

**Destinations.** A route's webhook and Alertmanager must be public addresses, as the crawler's
targets must (the same special-purpose ranges are refused: loopback, private networks, link-local
and cloud metadata …), unless ``LEITSTAND_NOTIFY_ALLOWED_TARGETS`` lists the ``host:port`` — an
in-house Alertmanager or PHP core is allow-listed by whoever deploys, not by a console user. Checked
when a route is saved and again before every delivery.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.urls import reverse

from dashboard.audit import audit_record
from dashboard.models import Contact, Owner, ReceiptTest, Route
from jobs.models import OPERATE_PERMISSION, database_now
from jobs.services import JobInputError
from workers.pipeline import http

logger = logging.getLogger(__name__)

SALT = "leitstand.receipt-test"
_SEEDED_FIELDS = (
    "ack_page_minutes",
    "ack_ticket_minutes",
    "renotify_minutes",
    "test_every_hours",
    "confirm_within_hours",
)


class ReceiptAlreadyConfirmed(JobInputError):
    """The token was used: a test confirms once."""


def public_url(path: str) -> str:
    """``path`` as an absolute link for a notification (``LEITSTAND_PUBLIC_URL``; relative without it)."""
    return settings.LEITSTAND_PUBLIC_URL.rstrip("/") + path


def routes_ensure(names: set[str]) -> None:
    """Create the routes among ``names`` (and those the setting declares) that do not exist yet."""
    configured = settings.LEITSTAND_ALERT_ROUTES
    wanted = set(names) | set(configured) | {settings.LEITSTAND_ALERT_FALLBACK_ROUTE}
    missing = wanted - set(Route.objects.filter(name__in=wanted).values_list("name", flat=True))
    if not missing:
        return
    with transaction.atomic():
        created = {}
        for name in sorted(missing):
            config = configured.get(name, {})
            owner = None
            if config.get("owner"):
                owner, _ = Owner.objects.get_or_create(name=config["owner"])
                for contact in config.get("contacts", []):
                    Contact.objects.get_or_create(owner=owner, name=contact["name"], defaults=contact)
            route, is_new = Route.objects.get_or_create(
                name=name,
                defaults={
                    "owner": owner,
                    "webhook_url": config.get("webhook", ""),
                    "webhook_secret": config.get("secret", ""),
                    "emails": list(config.get("email", [])),
                    "alertmanager_url": config.get("alertmanager", ""),
                    **{field: config[field] for field in _SEEDED_FIELDS if field in config},
                },
            )
            if is_new:
                created[name] = route
        for name, route in created.items():  # links between routes, once all exist
            config = configured.get(name, {})
            for field in ("escalate_to", "fallback"):
                if config.get(field):
                    setattr(
                        route,
                        f"{field}_id",
                        Route.objects.filter(name=config[field]).values_list("pk", flat=True).first(),
                    )
            route.save()


def route_named(name: str) -> Route | None:
    return Route.objects.select_related("owner", "escalate_to", "fallback").filter(name=name).first()


def fallback_of(route: Route) -> str:
    return route.fallback.name if route.fallback_id else settings.LEITSTAND_ALERT_FALLBACK_ROUTE


# --- tests of receipt -------------------------------------------------------------------------


def destination_problem(url: str) -> str | None:
    """Why a notification must not be sent to ``url`` (``workers.pipeline.http.destination_problem``)."""
    return http.destination_problem(url)


def receipt_token(test: ReceiptTest) -> str:
    """The test's confirmation token: its ID, signed (only the delivered message carries it)."""
    return signing.dumps({"t": test.pk}, salt=SALT)


def receipt_test_send(*, route: Route, actor: str, now: datetime | None = None) -> ReceiptTest:
    """Record a test of ``route`` and queue its notification in the same transaction."""
    from dashboard.operations import notify  # notify imports this module for its links

    now = now or database_now()
    with transaction.atomic():
        test = ReceiptTest.objects.create(
            route=route,
            sent_at=now,
            sent_by=actor[:255],
            confirm_by=now + timedelta(hours=route.confirm_within_hours),
        )
        notify.test_notify(route, test)
    return test


def receipt_test_now(*, route_id: int, actor: str, user) -> ReceiptTest:
    """An operator sends a test now (the console's Routes page)."""
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} may not send test notifications")
    route = Route.objects.filter(pk=route_id).first()
    if route is None:
        raise JobInputError("route", f"route {route_id} does not exist")
    if not route.channels:
        raise JobInputError("route", f"route {route.name} has no channel to send a test to")
    return receipt_test_send(route=route, actor=actor)


def receipt_tests_send() -> int:
    """The schedule: a test for every route with channels whose last test is older than its interval."""
    now = database_now()
    sent = 0
    for route in Route.objects.filter(test_every_hours__isnull=False).exclude(test_every_hours=0):
        if not route.channels:
            continue
        last = route.tests.order_by("-sent_at").values_list("sent_at", flat=True).first()
        if last is None or now - last >= timedelta(hours=route.test_every_hours):
            try:
                receipt_test_send(route=route, actor="schedule", now=now)  # in a savepoint of its own
            except Exception:
                # One route whose test cannot be queued is logged (and, unconfirmed, fires
                # route_unconfirmed in time); the other routes are still tested.
                logger.exception("the test of route %s could not be sent", route.name)
                continue
            sent += 1
    return sent


def confirm_link(token: str) -> str:
    """The confirmation page with the token in the URL's fragment: a browser never sends a fragment,
    so the token stays out of access logs and proxies; the page's script posts it."""
    return public_url(reverse("admin:receipt_confirm")) + "#" + token


def receipt_test_for(token: str) -> ReceiptTest:
    """The test a token belongs to; a precise error for a forged, altered or unknown token."""
    try:
        data = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        raise JobInputError(
            "token", "is not a confirmation token of this Leitstand (its signature does not match)"
        ) from None
    test_id = data.get("t") if isinstance(data, dict) else None
    test = ReceiptTest.objects.select_related("route").filter(pk=test_id).first() if isinstance(test_id, int) else None
    if test is None:
        raise JobInputError("token", "belongs to no test notification (it was removed or never sent)")
    return test


def receipt_confirm(*, token: str, actor: str, via: str) -> ReceiptTest:
    """Confirm receipt (once); audited. A second use, or a token of another test, is refused."""
    test = receipt_test_for(token)
    with transaction.atomic():
        test = ReceiptTest.objects.select_for_update().select_related("route").get(pk=test.pk)
        if test.confirmed_at is not None:
            raise ReceiptAlreadyConfirmed(
                "token", f"was used already: this test was confirmed at {test.confirmed_at:%Y-%m-%d %H:%M:%S}"
            )
        now = database_now()
        if now > test.confirm_by:
            # A token lives as long as its test: a link found later in a mailbox or a log proves nothing
            # about today's receipt. The next test (or "send a test now") carries a fresh one.
            raise JobInputError(
                "token", f"expired: this test had to be confirmed by {test.confirm_by:%Y-%m-%d %H:%M:%S} UTC"
            )
        test.confirmed_at, test.confirmed_by, test.confirmed_via = now, actor[:255], via
        test.save(update_fields=["confirmed_at", "confirmed_by", "confirmed_via"])
    audit_record(
        actor=actor,
        action="route.receipt_confirmed",
        target=f"route {test.route.name}",
        reason=f"test of {test.sent_at:%Y-%m-%d %H:%M:%S}",
        result=f"confirmed via {via}",
    )
    return test


def route_summaries() -> list[dict]:
    """Every route with its owner, channels, last test and last confirmed receipt (the Routes page)."""
    rows = []
    for route in (
        Route.objects.select_related("owner", "escalate_to", "fallback")
        .prefetch_related("owner__contacts")
        .order_by("name")
    ):
        tests = route.tests.order_by("-sent_at")
        rows.append(
            {
                "route": route,
                "contacts": list(route.owner.contacts.all()) if route.owner else [],
                "last_test": tests.first(),
                "last_confirmed": tests.filter(confirmed_at__isnull=False).first(),
                "fallback": fallback_of(route),
            }
        )
    return rows
