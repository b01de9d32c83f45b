"""Stuck leases: jobs whose lease ran out and that the reaper has not released yet, with a release
by hand (operators; a reason; each job audited on its own, so one refusal does not stop the rest)."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django_fsm import TransitionNotAllowed

from dashboard.audit import audited
from dashboard.pages.common import actor, render, require
from dashboard.selectors import STUCK_ROWS
from dashboard.selectors import stuck_leases as stuck_leases_read
from jobs.leases import JobNotFound, StaleAttempt
from jobs.models import OPERATE_PERMISSION
from jobs.selectors import short_id as id_short
from jobs.services import JobInputError, job_release


def stuck_leases(request) -> TemplateResponse | HttpResponseRedirect:
    require(request, "jobs.view_job")
    if request.method == "POST":
        require(request, "jobs.operate_job")
        _release_chosen(request)
        return HttpResponseRedirect(reverse("admin:stuck_leases"))
    return render(
        request,
        "admin/console/_stuck_live.html" if request.htmx else "admin/console/stuck.html",
        "Stuck leases",
        {
            "stuck": stuck_leases_read(),
            "shown_at_most": STUCK_ROWS,
            "can_operate": request.user.has_perm("jobs.operate_job"),
        },
    )


def _release_chosen(request) -> None:
    reason = request.POST.get("reason", "").strip()
    if not reason:
        messages.error(request, "A reason is required to release leases.")
        return
    for job_id in request.POST.getlist("job"):
        try:
            job_id = str(uuid.UUID(job_id))
        except ValueError:
            messages.error(request, f"{job_id[:40]!r} is not a job ID: nothing released")
            continue
        try:
            result = audited(
                request,
                action="lease.release",
                target=f"job {job_id}",
                reason=reason,
                permission=OPERATE_PERMISSION,
                apply=lambda job_id=job_id: _release(job_id, actor=actor(request), reason=reason, user=request.user),
            )
        except (JobInputError, JobNotFound, PermissionDenied, StaleAttempt, TransitionNotAllowed) as refused:
            result = f"not released: {refused}"
        messages.info(request, f"{id_short(job_id)}: {result}")


def _release(job_id: str, *, actor: str, reason: str, user) -> str:
    job_release(job_id=job_id, actor=actor, reason=reason, user=user)
    return "released: planned again, due now"
