"""The API's alert rule, registered with the alerts (``api/apps.py``): a client whose submissions
backpressure refuses (``api/backpressure.py`` counts them per minute)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Sum

from alerts.alert_rules import Firing, Rule, option
from api.models import ApiRefusalWindow
from jobs.display import ago

NO_CLIENT = "(none: the system's own tokens)"


def _submissions_refused(now: datetime, memory: dict) -> list[Firing]:
    window = option("api_submissions_refused", "window_seconds")
    rows = (
        ApiRefusalWindow.objects.filter(window_start__gt=now - timedelta(seconds=window))
        .order_by()
        .values("client__name", "reason", "pool")
        .annotate(n=Sum("refused"))
    )
    by_client: dict[str, list[dict]] = {}
    for row in rows:
        by_client.setdefault(row["client__name"] or "", []).append(row)
    firings = []
    for name, refusals in sorted(by_client.items()):
        scope, total = f"client:{name}", sum(r["n"] for r in refusals)
        if total < option("api_submissions_refused", "count", scope):
            continue
        why = "; ".join(
            f"{r['n']:,} × 429 at its bound of open jobs (pool {r['pool']})"
            if r["reason"] == ApiRefusalWindow.Reason.CLIENT_OPEN_JOBS
            else f"{r['n']:,} × 503 for pool {r['pool']}'s full bulk lane"
            for r in sorted(refusals, key=lambda r: -r["n"])
        )
        firings.append(
            Firing(
                scope,
                total,
                option("api_submissions_refused", "count", scope),
                f"client {name or NO_CLIENT}: {total:,} submissions refused in the last "
                f"{ago(window)} — {why}: it does not wait out Retry-After, or its pool cannot keep up",
            )
        )
    return firings


SUBMISSIONS_REFUSED = Rule(
    "api_submissions_refused", "A client's API submissions are refused by backpressure", _submissions_refused
)
