"""The console's Routes page — every route with its owner, channels, escalation and tested receipt;
every rule with its severity, route and owner; the silences — and the page a test's confirmation
link opens. Mounted by ``dashboard.site.ConsoleSite``; every change goes through the services in
``dashboard/operations`` (which check the person's permission) and is audited there."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import reverse

from alerts.alert_rules import RULES, route_of
from alerts.evaluation import routes_needed
from alerts.models import Alert, Route
from alerts.receipts import receipt_confirm, receipt_test_now
from alerts.routes import route_summaries, routes_ensure
from alerts.silences import ActiveSilences, silence_create, silence_lift
from dashboard.display import as_id, as_number
from dashboard.pages.common import actor, render
from jobs.models import database_now
from jobs.services import JobInputError

SILENCE_CHOICES = ((30, "30 min"), (60, "1 h"), (240, "4 h"), (720, "12 h"), (1440, "1 day"), (10080, "7 days"))


def _back(request) -> str:
    """Where a form returns to: the alert it was sent from, or the Routes page."""
    alert_id = as_id(request.POST.get("alert", ""))
    if alert_id is not None and Alert.objects.filter(pk=alert_id).exists():
        return reverse("admin:alerts_alert_change", args=[alert_id])
    return reverse("admin:alert_routes")


def routes_page(request):
    if not request.user.has_perm("alerts.view_route"):
        raise PermissionDenied("the Routes page needs the permission alerts.view_route")
    if request.method == "POST":
        return _act(request)
    now = database_now()
    routes_ensure(routes_needed())  # what the evaluator would create: each route is listed and editable
    routes = {route.name: route for route in Route.objects.select_related("owner")}
    silences = ActiveSilences(now).active
    rules = []
    for rule in RULES.values():
        route = routes.get(route_of(rule, ""))
        rules.append(
            {
                "rule": rule,
                "route": route.name if route else route_of(rule, ""),
                "owner": route.owner if route and route.owner_id else None,
                "channels": route.channels if route else [],
                "silences": [s for s in silences if s.rule == rule.name],
            }
        )
    summaries = route_summaries()
    for row in summaries:
        test = row["last_test"]
        if test is None:
            row["receipt"] = ("quiet", "never tested")
        elif test.confirmed_at:
            row["receipt"] = ("live", "confirmed")
        elif test.confirm_by <= now:
            row["receipt"] = ("gone", "not confirmed in time")
        else:
            row["receipt"] = ("quiet", "waiting for confirmation")
    return render(
        request,
        "admin/console/routes.html",
        "Alert routes, owners and silences",
        {
            "routes": summaries,
            "rules": rules,
            "silences": silences,
            "silence_choices": SILENCE_CHOICES,
            "can_operate": request.user.has_perm("jobs.operate_job"),
            "can_edit": request.user.has_perm("alerts.change_route"),
        },
    )


def _act(request):
    action = request.POST.get("action")
    try:
        if action == "test":
            route_id = as_id(request.POST.get("route", ""))
            if route_id is None:
                raise JobInputError("route", "choose a route")
            test = receipt_test_now(route_id=route_id, actor=actor(request), user=request.user)
            messages.success(
                request,
                f"Test sent to route {test.route.name} ({', '.join(test.route.channels)}); "
                f"it asks for confirmation by {test.confirm_by:%Y-%m-%d %H:%M}.",
            )
        elif action == "silence":
            minutes = as_number(request.POST.get("minutes", ""))
            silence = silence_create(
                rule=request.POST.get("rule", ""),
                scope=request.POST.get("scope", ""),
                minutes=-1 if minutes is None else minutes,
                reason=request.POST.get("reason", ""),
                actor=actor(request),
                user=request.user,
            )
            messages.success(request, f"Silenced {silence}: its alerts notify nobody until then.")
        elif action == "lift":
            silence_id = as_id(request.POST.get("silence", ""))
            if silence_id is None:
                raise JobInputError("silence", "choose a silence")
            silence = silence_lift(silence_id=silence_id, actor=actor(request), user=request.user)
            messages.success(request, f"Lifted the silence of {silence.rule} {silence.scope or '(every scope)'}.")
        else:
            raise JobInputError("action", "must be test, silence or lift")
    except (JobInputError, PermissionDenied) as refused:
        messages.error(request, str(refused))
    return HttpResponseRedirect(_back(request))


def receipt_confirm_page(request):
    """The link in a test notification: its token travels in the URL's fragment (never in a request
    line, so never in an access log); the page's script puts it into the form, and one POST confirms
    (never a GET: mail scanners open links). A token can also be pasted."""
    if not request.user.has_perm("alerts.view_route"):
        raise PermissionDenied("confirming receipt needs a console login that sees the routes")
    refused = ""
    if request.method == "POST":
        try:
            test = receipt_confirm(token=request.POST.get("token", "").strip(), actor=actor(request), via="console")
            messages.success(request, f"Receipt of the test of route {test.route.name} confirmed. Thank you.")
            return HttpResponseRedirect(reverse("admin:alert_routes"))
        except JobInputError as error:
            refused = error.message
    return render(
        request,
        "admin/console/receipt_confirm.html",
        "Confirm receipt of a test notification",
        {"refused": refused},
        status=200 if not refused else 400,
    )
