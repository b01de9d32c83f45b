"""Business rules across jobs: each rule with its options, its open violations and the last resolved."""

from __future__ import annotations

from alerts import options
from alerts.business_rules import RULES
from alerts.models import RuleViolation
from dashboard.pages.common import render, require


def business_rules(request):
    require(request, "jobs.view_job")
    alerting = options.current()
    rules = []
    for rule in RULES.values():
        violations = RuleViolation.objects.filter(rule=rule.name)
        rules.append(
            {
                "rule": rule,
                "options": alerting.business_rules[rule.name],
                "open": list(violations.filter(resolved_at__isnull=True).order_by("first_seen")[:100]),
                "open_count": violations.filter(resolved_at__isnull=True).count(),
                "resolved": list(violations.filter(resolved_at__isnull=False).order_by("-resolved_at")[:10]),
            }
        )
    return render(
        request,
        "admin/console/rules.html",
        "Business rules across jobs",
        {"rules": rules, "every": alerting.business_rules_seconds},
    )
