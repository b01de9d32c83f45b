"""Act on every job a filter matches: the dry run of the action (what it would change and what it
leaves), then, confirmed with the number of jobs and a reason, a bulk operation the control process
runs in throttled batches (``dashboard.operations.bulk``)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.urls import reverse

from dashboard.operations import bulk as operations
from dashboard.pages.common import actor, render, require
from jobs.services import JobInputError


def bulk(request):
    require(request, "jobs.view_job")
    params = request.POST if request.method == "POST" else request.GET
    action = params.get("action_name") or None  # None: the dry run of the action that fits the filter
    context = {
        "can_operate": request.user.has_perm("jobs.operate_job"),
        "query": request.GET.urlencode(),
        "query_without_action": urlencode([(k, v) for k, v in request.GET.items() if k != "action_name"]),
    }
    try:
        job_filter = operations.filter_from(request.GET)
        context.update(
            job_filter=job_filter, preview=operations.bulk_preview(action, job_filter), actions=operations.ACTIONS
        )
        if request.method == "POST":
            return _start(request, action, job_filter)
    except JobInputError as refused:
        context["error"] = str(refused)
    return render(request, "admin/console/bulk.html", "Act on every job the filter matches", context)


def _start(request, action, job_filter):
    require(request, "jobs.operate_job")
    if request.POST.get("confirm") != "yes":
        raise JobInputError("confirm", "tick the confirmation: it names the action and the jobs it will change")
    try:
        confirmed = int(request.POST.get("eligible", ""))
    except ValueError:
        raise JobInputError("eligible", "the confirmed number of jobs is missing") from None
    operation = operations.bulk_start(
        action=action,
        job_filter=job_filter,
        actor=actor(request),
        reason=request.POST.get("reason", ""),
        user=request.user,
        confirmed_eligible=confirmed,
    )
    messages.success(
        request,
        f"Bulk operation {operation.pk} started: {operation.eligible} jobs, "
        f"in batches of {operations.BATCH}, run by the control process.",
    )
    return HttpResponseRedirect(reverse("admin:dashboard_bulkoperation_change", args=[operation.pk]))
