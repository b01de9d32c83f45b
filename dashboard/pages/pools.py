"""Pause and resume a pool from the home, with a reason (operators; audited)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from dashboard.audit import audited
from dashboard.pages.common import actor
from jobs.models import OPERATE_PERMISSION
from jobs.services import JobInputError
from workers.runtime.services import pool_pause, pool_resume


def pool_act(request, pool):
    """Pause or resume ``pool`` (POST), then back to the home's pipeline view."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    action = request.POST.get("action")
    reason = request.POST.get("reason", "").strip()
    if action not in ("pause", "resume"):
        messages.error(request, "Choose pause or resume.")
    elif not reason:
        messages.error(request, f"A reason is required to {action} the pool {pool}.")
    else:
        service = pool_pause if action == "pause" else pool_resume

        def apply() -> str:
            service(pool=pool, actor=actor(request), reason=reason, user=request.user)
            return f"{action}d"

        try:
            audited(
                request,
                action=f"pool.{action}",
                target=f"pool {pool}",
                reason=reason,
                permission=OPERATE_PERMISSION,
                apply=apply,
            )
        except JobInputError as refused:
            messages.error(request, str(refused))
        else:
            messages.success(request, f"Pool {pool} {action}d: {reason}")
    return HttpResponseRedirect(reverse("admin:index") + "#pipeline")
