"""A rule's runbook (``docs/runbooks/<rule>.md``) with the rule's open alerts."""

from __future__ import annotations

from django.http import Http404

from alerts import alert_rules
from alerts.models import Alert
from dashboard.pages.common import render


def runbook(request, rule):
    try:
        text = alert_rules.runbook(rule)
    except (KeyError, FileNotFoundError):
        raise Http404(f"no runbook for {rule}") from None
    return render(
        request,
        "admin/console/runbook.html",
        f"Runbook: {alert_rules.RULES[rule].title}",
        {
            "rule": rule,
            "text": text,
            "open_alerts": Alert.objects.filter(rule=rule).exclude(state=Alert.State.RESOLVED).order_by("-last_seen"),
        },
    )
