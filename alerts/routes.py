"""Alert routes as records: who owns them, where they deliver, what they fall back to.

Routes, their owners and contacts are rows (``Route``, ``Owner``, ``Contact``) that operators edit
in the console. ``routes_ensure`` creates every route a rule, the fallback or
``LEITSTAND_ALERT_ROUTES`` names and the database does not have yet, from that setting (owner,
contacts, channels, times); a route that exists is never overwritten: the console's edits win.

Receipt tests — proof that a route still reaches someone — are ``receipts``.

**Destinations.** A route's webhook and Alertmanager must be public addresses, as the crawler's
targets must (the same special-purpose ranges are refused: loopback, private networks, link-local
and cloud metadata …), unless ``LEITSTAND_NOTIFY_ALLOWED_TARGETS`` lists the ``host:port`` — an
in-house Alertmanager or PHP core is allow-listed by whoever deploys, not by a console user. Checked
when a route is saved and again before every delivery.
"""

from __future__ import annotations

import logging

from django.db import transaction

from alerts import options
from alerts.models import Contact, Owner, Route

logger = logging.getLogger(__name__)

_SEEDED_FIELDS = (
    "ack_page_minutes",
    "ack_ticket_minutes",
    "renotify_minutes",
    "test_every_hours",
    "confirm_within_hours",
)


def public_url(path: str) -> str:
    """``path`` as an absolute link for a notification (``LEITSTAND_PUBLIC_URL``; relative without it)."""
    return options.current().public_url.rstrip("/") + path


def routes_ensure(names: set[str]) -> None:
    """Create the routes among ``names`` (and those the setting declares) that do not exist yet."""
    alerting = options.current()
    configured = alerting.routes
    wanted = set(names) | set(configured) | {alerting.fallback_route}
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
    return route.fallback.name if route.fallback_id else options.current().fallback_route


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
