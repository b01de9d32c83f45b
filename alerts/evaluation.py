"""Alerts: the rules of ``alert_rules`` evaluated by the control process, and the alert records
they keep. ``alerts_evaluate`` reconciles what each rule sees with the open alerts, one per
(rule, scope):

- a condition seen for the first time opens a *pending* alert; it *fires* only after it held for the
  rule's ``for_seconds`` (a blip never pages anyone);
- a firing (or acknowledged) alert *resolves* only after its condition stayed clear for
  ``clear_seconds`` (flap suppression); a pending alert whose condition clears is dropped;
- every change is an ``AlertEvent`` (fired, acknowledged, resolved, with actor and comment): the
  history is kept; each is delivered to the alert's route unless a silence mutes it (``silences``);
  alerts nobody acknowledges escalate.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction

from alerts import notify, options
from alerts.alert_rules import RULES, option, route_of, rule_memory, rule_title
from alerts.models import Alert, AlertEvent, Route
from alerts.routes import route_named, routes_ensure
from alerts.silences import ActiveSilences
from jobs.audit import audit_record
from jobs.display import clock
from jobs.models import OPERATE_PERMISSION, database_now
from jobs.services import JobInputError

logger = logging.getLogger(__name__)


def alerts_evaluate(*, now: datetime | None = None) -> dict:
    """Evaluate every rule and reconcile the open alerts; returns counts of what changed."""
    now = now or database_now()
    routes_ensure(routes_needed())
    report = {"fired": 0, "resolved": 0, "open": 0, "escalated": 0, "renotified": 0, "failed_rules": []}
    silenced = ActiveSilences(now)
    failing = rule_memory.setdefault("rules_failing", {})
    for rule in RULES.values():
        try:
            with transaction.atomic():
                _rule_reconcile(rule, now, silenced, report)
        except Exception as failed:
            # One rule that cannot be evaluated (a bad row, a scope the table refuses) is logged,
            # counted and fires alert_rule_failing; every other rule is still evaluated and its
            # alerts still reach people.
            logger.exception("alert rule %s could not be evaluated this round", rule.name)
            report["failed_rules"].append(rule.name)
            failing[rule.name] = f"{type(failed).__name__}: {failed}"[:500]
        else:
            failing.pop(rule.name, None)
    for kind in _escalate(now, silenced):
        report[kind] += 1
    report["open"] = Alert.objects.filter(state__in=(Alert.State.FIRING, Alert.State.ACKNOWLEDGED)).count()
    return report


def _rule_reconcile(rule, now: datetime, silenced, report: dict) -> None:
    """Evaluate one rule and bring its open alerts in line: fire, refresh, resolve."""
    firing = {f.scope: f for f in rule.evaluate(now, rule_memory)}
    with transaction.atomic():
        open_alerts = {
            a.scope: a
            for a in Alert.objects.select_for_update().filter(rule=rule.name).exclude(state=Alert.State.RESOLVED)
        }
        for scope, found in firing.items():
            alert = open_alerts.get(scope) or Alert(
                rule=rule.name,
                scope=scope,
                first_seen=now,
                route=found.route or route_of(rule, scope),
                severity=option(rule.name, "severity", scope, rule.severity),
                state=Alert.State.PENDING,
            )
            alert.last_seen, alert.value, alert.threshold, alert.diagnosis = (
                now,
                found.value,
                found.threshold,
                found.diagnosis[:1000],
            )
            alert.cleared_since = None
            if alert.state == Alert.State.PENDING and (now - alert.first_seen).total_seconds() >= option(
                rule.name, "for_seconds", scope
            ):
                alert.state, alert.fired_at = Alert.State.FIRING, now
                report["fired"] += 1
                alert.save()
                event = AlertEvent.objects.create(
                    alert=alert, kind="fired", actor="alert-evaluator", comment=alert.diagnosis
                )
                _notify(alert, event, silenced, now)
                continue
            alert.save()
        for scope, alert in open_alerts.items():
            if scope in firing:
                continue
            if alert.state == Alert.State.PENDING:
                alert.delete()  # never fired: a blip
                continue
            alert.cleared_since = alert.cleared_since or now
            is_resolved = (now - alert.cleared_since).total_seconds() >= option(rule.name, "clear_seconds", scope)
            if is_resolved:
                alert.state, alert.resolved_at = Alert.State.RESOLVED, now
            alert.save()
            if is_resolved:
                event = AlertEvent.objects.create(
                    alert=alert,
                    kind="resolved",
                    actor="alert-evaluator",
                    comment=f"condition clear since {clock(alert.cleared_since)}",
                )
                _notify(alert, event, silenced, now)
                report["resolved"] += 1


def routes_needed() -> set[str]:
    """Every route a rule may go to: its own, and those ``LEITSTAND_ALERTS`` names for it or a scope."""
    return {rule.route for rule in RULES.values()} | {
        override["route"]
        for config in options.current().rules.values()
        for override in [config, *config.get("overrides", {}).values()]
        if override.get("route")
    }


def _notify(alert: Alert, event: AlertEvent, silenced: ActiveSilences, now: datetime) -> None:
    """Queue the route's deliveries in the transaction that records the event (idempotent per event),
    unless a silence mutes the alert: then the event says so and nobody is notified."""
    silence = silenced(alert)
    if silence is not None:
        event.comment = f"{event.comment} — silenced until {silence.ends_at:%Y-%m-%d %H:%M} by {silence.created_by}: nobody notified"[
            :1000
        ]
        event.save(update_fields=["comment"])
        return
    title = rule_title(alert.rule)
    message = notify.message_for(alert, event.kind, title=title, event_id=event.pk, comment=event.comment)
    notify.deliver(message, to=alert.route, key=f"alert-event-{event.pk}", correlation_id=f"alert-{alert.pk}")
    if alert.escalated_at and alert.state != Alert.State.FIRING:  # the escalation target hears how it ended
        route = route_named(alert.route)
        if route and route.escalate_to_id:
            notify.deliver(
                message,
                to=route.escalate_to.name,
                key=f"alert-event-{event.pk}-escalated",
                correlation_id=f"alert-{alert.pk}",
            )
    Alert.objects.filter(pk=alert.pk).update(notified_at=now)


def _escalate(now: datetime, silenced: ActiveSilences) -> list[str]:
    """Firing alerts nobody acknowledged: escalate once after the route's acknowledgement time for
    the alert's severity, and notify again every ``renotify_minutes`` until acknowledged."""
    done = []
    routes = {route.name: route for route in Route.objects.select_related("escalate_to", "escalate_to__owner")}
    for alert in Alert.objects.filter(state=Alert.State.FIRING).order_by("pk"):
        route = routes.get(alert.route)
        if route is None or silenced(alert) is not None:
            continue
        ack = route.ack_minutes(alert.severity)
        title = rule_title(alert.rule)
        with transaction.atomic():
            if ack is not None and alert.escalated_at is None and now - alert.fired_at >= timedelta(minutes=ack):
                target = route.escalate_to
                comment = (
                    f"not acknowledged within {ack} min ({alert.severity}): escalated to route {target.name}"
                    + (f" (owner {target.owner.name})" if target.owner_id else "")
                    if target
                    else f"not acknowledged within {ack} min ({alert.severity}); route {route.name} has no escalation "
                    f"target: notified again"
                )
                event = AlertEvent.objects.create(
                    alert=alert, kind="escalated", actor="alert-evaluator", comment=comment
                )
                message = notify.message_for(alert, "escalated", title=title, event_id=event.pk, comment=comment)
                notify.deliver(
                    message,
                    to=target.name if target else route.name,
                    key=f"alert-event-{event.pk}",
                    correlation_id=f"alert-{alert.pk}",
                )
                Alert.objects.filter(pk=alert.pk).update(escalated_at=now, notified_at=now)
                done.append("escalated")
            elif route.renotify_minutes and (
                alert.notified_at is None or now - alert.notified_at >= timedelta(minutes=route.renotify_minutes)
            ):
                comment = (
                    f"still firing, not acknowledged; notified again every {route.renotify_minutes} min"
                    if alert.notified_at
                    else "nobody has been notified of it yet: notified now"
                )
                event = AlertEvent.objects.create(
                    alert=alert, kind="renotified", actor="alert-evaluator", comment=comment
                )
                message = notify.message_for(alert, "renotified", title=title, event_id=event.pk, comment=comment)
                key = f"alert-event-{event.pk}"
                notify.deliver(message, to=route.name, key=key, correlation_id=f"alert-{alert.pk}")
                if alert.escalated_at and route.escalate_to_id:
                    notify.deliver(
                        message, to=route.escalate_to.name, key=f"{key}-escalated", correlation_id=f"alert-{alert.pk}"
                    )
                Alert.objects.filter(pk=alert.pk).update(notified_at=now)
                done.append("renotified")
    return done


def alert_acknowledge(*, alert_id: int, actor: str, comment: str, user) -> Alert:
    return _human(alert_id, actor, comment, user, Alert.State.ACKNOWLEDGED, "acknowledged")


def alert_resolve(*, alert_id: int, actor: str, comment: str, user) -> Alert:
    return _human(alert_id, actor, comment, user, Alert.State.RESOLVED, "resolved")


def _human(alert_id, actor, comment, user, target, kind) -> Alert:
    if not comment or not comment.strip():
        raise JobInputError("comment", f"is required: say why the alert is {kind}")
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} may not act on alerts")
    with transaction.atomic():
        alert = Alert.objects.select_for_update().filter(pk=alert_id).first()
        if alert is None:
            raise JobInputError("alert", f"alert {alert_id} does not exist")
        allowed = {
            Alert.State.ACKNOWLEDGED: (Alert.State.FIRING,),
            Alert.State.RESOLVED: (Alert.State.FIRING, Alert.State.ACKNOWLEDGED),
        }[target]
        if alert.state not in allowed:
            raise JobInputError("alert", f"alert {alert_id} is {alert.state}; it cannot be {kind}")
        alert.state = target
        if target == Alert.State.ACKNOWLEDGED:
            alert.acknowledged_by, alert.acknowledged_at = actor[:255], database_now()
        else:
            alert.resolved_at = database_now()
        alert.save()
        event = AlertEvent.objects.create(alert=alert, kind=kind, actor=actor[:255], comment=comment.strip()[:500])
        _notify(alert, event, ActiveSilences(), database_now())
    audit_record(
        actor=actor,
        action=f"alert.{kind}",
        target=f"alert {alert.pk} {alert.rule} {alert.scope}",
        reason=comment,
        result=alert.state,
    )
    return alert
