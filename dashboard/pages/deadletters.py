"""Dead letters: the dead-letter queue pivoted by type, error class and step with counts per window
(from the snapshot the control process refreshes, or live for one batch), each group's review, and
links to its jobs and to a retry or cancel of the group as a bulk action."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse

from dashboard import options as console_options
from dashboard.display import as_id
from dashboard.models import DeadLetterReview
from dashboard.operations.deadletters import (
    WINDOWS,
    dead_letter_groups,
    dead_letter_review,
    dead_letters_snapshot,
    reviews_attach,
)
from dashboard.pages.common import actor, render, require
from jobs.display import ago
from jobs.models import Batch, database_now
from jobs.services import JobInputError


def dead_letters(request):
    require(request, "jobs.view_job")
    if request.method == "POST":
        return _review(request)
    batch, scope = None, {}
    if request.GET.get("batch"):
        batch_id = as_id(request.GET["batch"])
        if batch_id is None or not (batch := Batch.objects.filter(pk=batch_id).first()):
            raise Http404(f"no batch {request.GET['batch'][:40]!r}")
        scope = {"batch": batch.pk}
    every = console_options.current().deadletters_seconds
    snapshot, age = None, None
    if batch:
        now = database_now()
        groups = dead_letter_groups(batch_id=batch.pk, now=now)
    else:
        groups, now, snapshot = dead_letters_snapshot()
        age = (database_now() - snapshot.refreshed_at).total_seconds()
    groups = reviews_attach(groups)
    for group in groups:
        group.links = dead_letter_links(group, scope, now)
        group.cells = list(zip(group.counts, group.links["windows"]))
    return render(
        request,
        "admin/console/_deadletters_live.html" if request.htmx else "admin/console/deadletters.html",
        f"Dead letters of batch {batch.name}" if batch else "Dead letters",
        {
            "groups": groups,
            "windows": [label for label, _ in WINDOWS],
            "batch": batch,
            "total": sum(g.total for g in groups),
            "can_operate": request.user.has_perm("jobs.operate_job"),
            "snapshot": snapshot,
            "snapshot_age": None if age is None else ago(age),
            "snapshot_stale": age is not None and age > max(every * 6, 30),
            "every": every,
            "decisions": DeadLetterReview.Decision.choices,
        },
    )


def _review(request):
    try:
        review = dead_letter_review(
            **{name: request.POST.get(name, "") for name in ("type", "error_class", "step", "decision", "note")},
            actor=actor(request),
            user=request.user,
        )
        messages.success(request, f"Reviewed: {review} — {review.note}")
    except (JobInputError, PermissionDenied) as refused:
        messages.error(request, str(refused))
    return HttpResponseRedirect(request.get_full_path())


def dead_letter_links(group, scope: dict, now) -> dict:
    """Where a group's numbers lead: the jobs list (per window: those dead since then) and the bulk
    actions, filtered to the group's type, error class and step (a group without a step: to its
    type and error class)."""
    query = {
        "state__exact": "dead",
        "type__exact": group.type,
        "error_class": group.error_class,
        **scope,
        **({"step": group.step} if group.step else {}),
    }
    jobs = reverse("admin:jobs_job_changelist")
    return {
        "windows": [
            f"{jobs}?{urlencode({**query, 'finished_at__gt': (now - span).isoformat()})}" for _, span in WINDOWS
        ],
        "all": f"{jobs}?{urlencode(query)}",
        "retry": f"{reverse('admin:bulk')}?{urlencode({**query, 'action_name': 'retry_now'})}",
        "cancel": f"{reverse('admin:bulk')}?{urlencode({**query, 'action_name': 'cancel'})}",
    }
