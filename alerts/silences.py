"""Silences: an operator mutes a rule for a scope for a while, with a reason; alerts still open,
fire and resolve, but nobody is notified while a silence matches (the alert's events say so)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction

from alerts.alert_rules import RULES
from alerts.models import Alert, Silence
from jobs.audit import audit_record
from jobs.models import OPERATE_PERMISSION, database_now
from jobs.services import JobInputError


class ActiveSilences:
    """The silences active now (read once): called with an alert, the one that mutes it, or None."""

    def __init__(self, now: datetime | None = None) -> None:
        now = now or database_now()
        self.active = list(Silence.objects.filter(lifted_at__isnull=True, ends_at__gt=now).order_by("ends_at"))

    def __call__(self, alert: Alert) -> Silence | None:
        """The matching silence that lasts longest (the one to show)."""
        matching = [s for s in self.active if s.rule == alert.rule and s.scope in ("", alert.scope)]
        return matching[-1] if matching else None


def silence_create(*, rule: str, scope: str, minutes: float, reason: str, actor: str, user) -> Silence:
    """Mute ``rule`` for ``scope`` (empty: every scope) for ``minutes``, with a reason; audited."""
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} may not silence alerts")
    if rule not in RULES:
        raise JobInputError("rule", f"unknown rule {str(rule)[:64]!r}; rules: {', '.join(RULES)}")
    scope = scope.strip() if isinstance(scope, str) else scope
    if not isinstance(scope, str) or not scope.isprintable():
        raise JobInputError("scope", "must be printable text (empty: every scope)")
    if not isinstance(minutes, (int, float)) or not 1 <= minutes <= 30 * 24 * 60:
        raise JobInputError("minutes", "must be from 1 to 43200 (30 days): a silence always ends")
    if not reason or not reason.strip():
        raise JobInputError("reason", "is required: say why nobody should be notified")
    if len(scope) > 300:
        raise JobInputError("scope", "is at most 300 characters")
    now = database_now()
    silence = Silence.objects.create(
        rule=rule,
        scope=scope,
        reason=reason.strip()[:500],
        created_by=actor[:255],
        created_at=now,
        ends_at=now + timedelta(minutes=minutes),
    )
    audit_record(
        actor=actor,
        action="alert.silenced",
        target=f"rule {rule} {scope or '(every scope)'}",
        reason=reason,
        result=f"silenced until {silence.ends_at:%Y-%m-%d %H:%M:%S}",
    )
    return silence


def silence_lift(*, silence_id: int, actor: str, user) -> Silence:
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} may not lift silences")
    now = database_now()
    with transaction.atomic():
        silence = Silence.objects.select_for_update().filter(pk=silence_id).first()
        if silence is None:
            raise JobInputError("silence", f"silence {silence_id} does not exist")
        if silence.lifted_at is not None or silence.ends_at <= now:
            raise JobInputError("silence", f"silence {silence_id} has ended already")
        silence.lifted_at, silence.lifted_by = now, actor[:255]
        silence.save(update_fields=["lifted_at", "lifted_by"])
    audit_record(
        actor=actor,
        action="alert.silence_lifted",
        target=f"rule {silence.rule} {silence.scope or '(every scope)'}",
        result="lifted",
    )
    return silence
