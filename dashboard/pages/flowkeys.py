"""A pool's flow keys (issue 39): each key with work or settings — its waiting jobs, oldest due time,
jobs running against its limit, weight, place in the fair share, rate limit, pause — one keyset page
at a time (fast at any number of keys), and an operator's change of one key's weight, limit, rate
limit or pause, with a reason (audited as ``flowkey.changed``; ``jobs.flows`` applies it)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode

from dashboard.audit import audited
from dashboard.display import as_id, moment, rate
from dashboard.pages.common import actor, render, require
from jobs import flows
from jobs.display import ago
from jobs.models import OPERATE_PERMISSION, FlowRest, database_now
from jobs.services import JobInputError
from workers.runtime.models import Pool
from workers.runtime.registry import registry

PAGE = 100


def flow_keys(request, pool: str):
    require(request, "jobs.view_job")
    if request.method == "POST":
        return _change(request, pool)
    after = request.GET.get("after")
    rows = flows.flow_keys(pool, limit=PAGE + 1, after=after if after and after.isprintable() else None)
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    default_limit = registry.flow_limit(pool)
    now = database_now()
    # The keys at rest (a host that may not be asked yet: docs/crawler.md), one read for the page.
    resting = dict(
        FlowRest.objects.filter(pool=pool, key__in=[row["stored"] for row in rows], until__gt=now).values_list(
            "key", "until"
        )
    )
    for row in rows:
        row["limit"] = row["max_running"] or (default_limit if row["key"] else None)
        row["rest_until"] = moment(resting[row["stored"]], now) if row["stored"] in resting else ""
        due_in = (row["oldest_due"] - now).total_seconds() if row["oldest_due"] else None
        row["due"] = "—" if due_in is None else f"due {ago(due_in)} ago" if due_in <= 0 else f"in {ago(due_in)}"
        row["rate"] = rate(row["rate_starts"], row["rate_seconds"]) if row["rate_starts"] else ""
        row["rate_until"] = moment(row["rate_limited_until"], now) if row["rate_limited_until"] else ""
    return render(
        request,
        "admin/console/flow_keys.html",
        f"Flow keys of pool {pool}",
        {
            "pool": pool,
            "known": Pool.objects.filter(name=pool).exists(),
            "rows": rows,
            "default_limit": default_limit,
            "next_page": f"?{urlencode({'after': rows[-1]['key']})}" if more else "",
            "first_page": bool(after),
            "can_operate": request.user.has_perm(OPERATE_PERMISSION),
            "edit": request.GET.get("key"),
        },
    )


def _change(request, pool: str) -> HttpResponseRedirect:
    key = request.POST.get("key", "")
    reason = request.POST.get("reason", "").strip()
    changes: dict = {}
    weight, limit = request.POST.get("weight", "").strip(), request.POST.get("max_running", "").strip()
    rate_starts, rate_seconds = (
        request.POST.get("rate_starts", "").strip(),
        request.POST.get("rate_seconds", "").strip(),
    )
    try:
        if weight:
            changes["weight"] = _whole(weight, "weight")
        if request.POST.get("default_limit") == "yes":
            changes["max_running"] = None
        elif limit:
            changes["max_running"] = _whole(limit, "max_running")
        if request.POST.get("no_rate") == "yes":
            changes["rate"] = None
        elif rate_starts or rate_seconds:
            changes["rate"] = (_whole(rate_starts, "rate_starts"), _whole(rate_seconds, "rate_seconds"))
        if request.POST.get("paused") in ("yes", "no"):
            changes["paused"] = request.POST["paused"] == "yes"

        def apply() -> str:
            settings = flows.flow_key_set(pool=pool, key=key, actor=actor(request), reason=reason, **changes)
            state = "paused" if settings.paused else "running"
            limits = f"limit {settings.max_running or 'default'}"
            if settings.rate_starts:
                limits += f", at most {rate(settings.rate_starts, settings.rate_seconds)}"
            return f"weight {settings.weight}, {limits}, {state}"

        done = audited(
            request,
            action="flowkey.changed",
            target=f"flow key {key!r} in pool {pool}",
            reason=reason,
            permission=OPERATE_PERMISSION,
            apply=apply,
        )
    except JobInputError as refused:
        messages.error(request, f"Not changed: {refused}")
    else:
        messages.success(request, f"Key {key!r} in pool {pool}: {done}.")
    return HttpResponseRedirect(reverse("admin:flow_keys", args=[pool]) + f"?{urlencode({'key': key})}")


def _whole(text: str, field: str) -> int:
    number = as_id(text)
    if number is None:
        raise JobInputError(field, "must be a whole number")
    return number
