"""The reviewer workspace: the review queue (or the escalated one), taking the next free case, and a
case's page with its evidence and the decision form. Taking and deciding go through
``dashboard.review``, which holds the case's review lease; every decision is audited."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django_fsm import TransitionNotAllowed

from dashboard import review
from dashboard.audit import audited
from dashboard.display import data_uri
from dashboard.pages.common import actor, render, require
from jobs.models import ESCALATED_REVIEW_PERMISSION, REVIEW_PERMISSION, Job, State
from jobs.selectors import short_id as id_short
from jobs.services import JobInputError, ReviewHeld


def _queue_suffix(escalated: bool) -> str:
    return "?queue=escalated" if escalated else ""


def review_queue(request):
    require(request, "jobs.view_job")
    escalated = request.GET.get("queue") == "escalated"
    return render(
        request,
        "admin/console/review_queue.html",
        "Review queue",
        {
            "escalated": escalated,
            "cases": review.queue(escalated=escalated, limit=100),
            "can_review": request.user.has_perm("jobs.review_job"),
        },
    )


def review_next(request):
    """Take the next free case (POST only: reading a page never takes a case) and show it."""
    require(request, "jobs.review_job")
    escalated = request.GET.get("queue") == "escalated"
    if request.method != "POST":
        return HttpResponseRedirect(reverse("admin:review_queue") + _queue_suffix(escalated))
    return _next_case(request, escalated=escalated)


def _next_case(request, *, escalated: bool):
    if escalated:
        require(request, ESCALATED_REVIEW_PERMISSION)
    job = review.take(reviewer=actor(request), escalated=escalated)
    if job is None:
        messages.info(request, "No open case is free: the queue is empty, or every case is held by a reviewer.")
        return HttpResponseRedirect(reverse("admin:review_queue") + _queue_suffix(escalated))
    return HttpResponseRedirect(reverse("admin:review_case", args=[job.id]) + _queue_suffix(escalated))


def review_case(request, job_id):
    require(request, "jobs.view_job")
    job = get_object_or_404(Job, pk=job_id)
    escalated = request.GET.get("queue") == "escalated"
    if request.method == "POST" and "take" in request.POST:
        return _take(request, job)
    if request.method == "POST":
        return _decide(request, job, escalated=escalated)
    holder = review.holder(job)
    case = review.case(job)
    return render(
        request,
        "admin/console/review_case.html",
        f"Review case {id_short(job.id)}",
        {
            "job": job,
            "case": case,
            "held_by_me": holder is not None and holder.reviewer == actor(request),
            "holder": holder,
            "can_decide_escalated": request.user.has_perm(ESCALATED_REVIEW_PERMISSION),
            "is_escalated": bool(review.escalated_by(job)),
            "escalated": escalated,
            "candidate_src": data_uri(case["candidate_thumbnail"]),
            "asset_src": data_uri(case["asset_image"]),
            "asset_size": case["asset_size"],
            "can_review": request.user.has_perm("jobs.review_job"),
        },
    )


def _take(request, job):
    require(request, "jobs.review_job")
    escalated_by = review.escalated_by(job)
    if escalated_by:
        require(request, ESCALATED_REVIEW_PERMISSION)
    me = actor(request)
    if (
        job.state == State.READY_FOR_REVIEW
        and review.take(reviewer=me, job_id=job.id, escalated=bool(escalated_by)) is None
    ):
        messages.error(
            request,
            "You escalated this case: another senior reviewer decides it."
            if escalated_by == me
            else "Another reviewer holds this case; it returns to the queue when their hold expires.",
        )
    return HttpResponseRedirect(request.get_full_path())


def _decide(request, job, *, escalated: bool):
    require(request, "jobs.review_job")
    verdict, reason = request.POST.get("verdict", ""), request.POST.get("reason", "").strip()
    try:
        message = audited(
            request,
            action=f"review.{verdict or 'unknown'}",
            target=f"job {job.id}",
            reason=reason,
            permission=REVIEW_PERMISSION,
            apply=lambda: review.decide(
                job_id=job.id, verdict=verdict, reason=reason, actor=actor(request), user=request.user
            ),
        )
    except (JobInputError, ReviewHeld, TransitionNotAllowed, PermissionDenied) as refused:
        messages.error(request, str(refused))
        return HttpResponseRedirect(request.get_full_path())
    messages.success(request, message)
    if request.POST.get("next") == "stop":
        return HttpResponseRedirect(reverse("admin:review_queue"))
    return _next_case(request, escalated=escalated)
