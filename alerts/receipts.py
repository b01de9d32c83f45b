"""Tested receipt: proof that an alert route still reaches someone.

Every route with a test interval gets a test notification on that schedule
(``receipt_tests_send``, a sweep of the control process), and an operator can send one now. The
test carries a confirmation token — the test's ID signed with the project's secret key (Django's
signing, its own salt) — so a confirmation proves the message reached a receiver: a person opens the
link (console, login required, one POST) or an automated receiver posts the token to the API. The
token exists only in the delivered message: the delivery job's payload names the test, and the
handler signs the token as it sends (job payloads are readable by viewers and read tokens). A token
confirms once; a test not confirmed by its ``confirm_by`` fires ``route_unconfirmed``
(``alerts/alert_rules.py``) to the route's fallback.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.urls import reverse

from alerts.models import ReceiptTest, Route
from alerts.routes import public_url
from jobs.audit import audit_record
from jobs.models import OPERATE_PERMISSION, database_now
from jobs.services import JobInputError
from workers.runtime.services import job_submit

logger = logging.getLogger(__name__)

SALT = "leitstand.receipt-test"


class ReceiptAlreadyConfirmed(JobInputError):
    """The token was used: a test confirms once."""


def receipt_token(test: ReceiptTest) -> str:
    """The test's confirmation token: its ID, signed (only the delivered message carries it)."""
    return signing.dumps({"t": test.pk}, salt=SALT)


def receipt_test_send(*, route: Route, actor: str, now: datetime | None = None) -> ReceiptTest:
    """Record a test of ``route`` and queue its notification in the same transaction."""
    now = now or database_now()
    with transaction.atomic():
        test = ReceiptTest.objects.create(
            route=route,
            sent_at=now,
            sent_by=actor[:255],
            confirm_by=now + timedelta(hours=route.confirm_within_hours),
        )
        test_notify(route, test)
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


def test_notify(route: Route, test: ReceiptTest) -> None:
    """Queue the test notification of ``route``, one delivery per channel. The payload names the
    test only: the handler signs the token as it sends (``test_message``)."""
    for channel in route.channels:
        job_submit(
            job_type="alert_notify",
            payload={"channel": channel, "route": route.name, "test_id": test.pk},
            idempotency_key=f"receipt-test-{test.pk}-{channel}",
            actor=test.sent_by,
            correlation_id=f"route-{route.name}",
        )


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
