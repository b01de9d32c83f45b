"""The console: Django's admin site with a home in three views, the reviewer workspace and the
stuck-leases page. Every page needs a staff login; every action checks the person's permission in
the service it calls and is written to the audit log."""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django_fsm import TransitionNotAllowed

from dashboard import review
from dashboard.audit import audited
from dashboard.diagram import declared_edges, state_diagram
from dashboard.display import ago, as_id, data_uri
from dashboard.models import Alert, DeadLetterReview, RuleViolation
from dashboard.operations import alert_rules, bulk
from dashboard.operations.deadletters import (
    WINDOWS,
    dead_letter_groups,
    dead_letter_review,
    dead_letters_snapshot,
    reviews_attach,
)
from dashboard.operations.rules import RULES as BUSINESS_RULES
from dashboard.operations.trends import trend_series
from dashboard.pages import routes as routes_pages
from dashboard.paths import type_paths
from dashboard.selectors import STUCK_ROWS, home_context, stuck_leases
from jobs.leases import JobNotFound, StaleAttempt
from jobs.models import (
    ESCALATED_REVIEW_PERMISSION,
    OPERATE_PERMISSION,
    REVIEW_PERMISSION,
    Batch,
    Job,
    State,
    database_now,
)
from jobs.services import JobInputError, ReviewHeld, job_release
from workers.runtime.registry import registry
from workers.runtime.services import pool_pause, pool_resume


class ConsoleSite(admin.AdminSite):
    site_header = "Leitstand"
    site_url = None  # no public site to "view": the console is the site
    site_title = "Leitstand"
    index_title = "Operations console"
    index_template = "admin/console_home.html"
    # The navigation bar and the home's list of records replace the model sidebar, which took a
    # quarter of a 1,280-px screen from every list (the alerts' diagnoses were cut off).
    enable_nav_sidebar = False

    def get_urls(self):
        views = [
            path("review/", self.admin_view(self.review_queue), name="review_queue"),
            path("review/next/", self.admin_view(self.review_next), name="review_next"),
            path("review/<uuid:job_id>/", self.admin_view(self.review_case), name="review_case"),
            path("stuck/", self.admin_view(self.stuck_leases), name="stuck_leases"),
            path("bulk/", self.admin_view(self.bulk), name="bulk"),
            path("runbooks/<slug:rule>/", self.admin_view(self.runbook), name="runbook"),
            path("paths/", self.admin_view(self.paths), name="paths"),
            path("flow/", self.admin_view(self.flow), name="flow"),
            path("rules/", self.admin_view(self.business_rules), name="business_rules"),
            path("deadletters/", self.admin_view(self.dead_letters), name="dead_letters"),
            path("pools/<slug:pool>/act/", self.admin_view(self.pool_act), name="pool_act"),
            path("trends/", self.admin_view(self.trends), name="trends"),
            path("routes/", self.admin_view(routes_pages.routes_page), name="alert_routes"),
            path("routes/confirm/", self.admin_view(routes_pages.receipt_confirm_page), name="receipt_confirm"),
        ]
        return views + super().get_urls()

    # --- home ------------------------------------------------------------------------------------

    def index(self, request, extra_context=None):
        if request.htmx:  # the live part alone (templates/admin/console/home_live.html)
            context = {**self.each_context(request), **home_context(), "live_refresh": True}
            return TemplateResponse(request, "admin/console/home_live.html", context)
        return super().index(request, {**home_context(), **(extra_context or {})})

    # --- reviewer workspace ---------------------------------------------------------------------

    def review_queue(self, request):
        _require(request, "jobs.view_job")
        escalated = request.GET.get("queue") == "escalated"
        return TemplateResponse(
            request,
            "admin/console/review_queue.html",
            {
                **self.each_context(request),
                "title": "Review queue",
                "escalated": escalated,
                "cases": review.queue(escalated=escalated, limit=100),
                "can_review": request.user.has_perm("jobs.review_job"),
            },
        )

    def review_next(self, request):
        """Take the next free case (POST only: reading a page never takes a case) and show it."""
        _require(request, "jobs.review_job")
        escalated = request.GET.get("queue") == "escalated"
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:review_queue") + ("?queue=escalated" if escalated else ""))
        return self._next_case(request, escalated=escalated)

    def _next_case(self, request, *, escalated: bool):
        if escalated:
            _require(request, ESCALATED_REVIEW_PERMISSION)
        job = review.take(reviewer=_actor(request), escalated=escalated)
        if job is None:
            messages.info(request, "No open case is free: the queue is empty, or every case is held by a reviewer.")
            return HttpResponseRedirect(reverse("admin:review_queue") + ("?queue=escalated" if escalated else ""))
        return HttpResponseRedirect(
            reverse("admin:review_case", args=[job.id]) + ("?queue=escalated" if escalated else "")
        )

    def review_case(self, request, job_id):
        _require(request, "jobs.view_job")
        job = get_object_or_404(Job, pk=job_id)
        escalated = request.GET.get("queue") == "escalated"
        actor = _actor(request)
        if request.method == "POST" and "take" in request.POST:
            _require(request, "jobs.review_job")
            escalated_by = review.escalated_by(job)
            if escalated_by:
                _require(request, ESCALATED_REVIEW_PERMISSION)
            if (
                job.state == State.READY_FOR_REVIEW
                and review.take(reviewer=actor, job_id=job.id, escalated=bool(escalated_by)) is None
            ):
                messages.error(
                    request,
                    "You escalated this case: another senior reviewer decides it."
                    if escalated_by == actor
                    else "Another reviewer holds this case; it returns to the queue when their hold expires.",
                )
            return HttpResponseRedirect(request.get_full_path())
        if request.method == "POST":
            _require(request, "jobs.review_job")
            verdict, reason = request.POST.get("verdict", ""), request.POST.get("reason", "").strip()
            try:
                message = audited(
                    request,
                    action=f"review.{verdict or 'unknown'}",
                    target=f"job {job.id}",
                    reason=reason,
                    permission=REVIEW_PERMISSION,
                    apply=lambda: review.decide(
                        job_id=job.id, verdict=verdict, reason=reason, actor=actor, user=request.user
                    ),
                )
            except (JobInputError, ReviewHeld, TransitionNotAllowed, PermissionDenied) as refused:
                messages.error(request, str(refused))
                return HttpResponseRedirect(request.get_full_path())
            messages.success(request, message)
            if request.POST.get("next") == "stop":
                return HttpResponseRedirect(reverse("admin:review_queue"))
            return self._next_case(request, escalated=escalated)
        holder = review.holder(job)
        case = review.case(job)
        return TemplateResponse(
            request,
            "admin/console/review_case.html",
            {
                **self.each_context(request),
                "title": f"Review case {str(job.id)[:8]}",
                "job": job,
                "case": case,
                "held_by_me": holder is not None and holder.reviewer == actor,
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

    # --- alerts and runbooks ---------------------------------------------------------------------

    def runbook(self, request, rule):
        try:
            text = alert_rules.runbook(rule)
        except (KeyError, FileNotFoundError):
            raise Http404(f"no runbook for {rule}") from None
        return TemplateResponse(
            request,
            "admin/console/runbook.html",
            {
                **self.each_context(request),
                "title": f"Runbook: {alert_rules.RULES[rule].title}",
                "rule": rule,
                "text": text,
                "open_alerts": Alert.objects.filter(rule=rule)
                .exclude(state=Alert.State.RESOLVED)
                .order_by("-last_seen"),
            },
        )

    # --- paths and the flow --------------------------------------------------------------------

    def paths(self, request):
        _require(request, "jobs.view_job")
        types = registry.all()
        chosen = request.GET.get("type") or "crawl"
        job_type = next((t for t in types if t.name == chosen), None)
        if job_type is None:
            raise Http404(f"no job type {chosen!r}")
        return TemplateResponse(
            request,
            "admin/console/paths.html",
            {
                **self.each_context(request),
                "title": f"Paths of {job_type.name}",
                "types": types,
                "job_type": job_type,
                "paths": type_paths(job_type),
            },
        )

    def flow(self, request):
        _require(request, "jobs.view_job")
        return TemplateResponse(
            request,
            "admin/console/flow.html",
            {
                **self.each_context(request),
                "title": "The flow: states, transitions and expected paths",
                "diagram": state_diagram(labels="all"),
                "edges": declared_edges(),
                "types": registry.all(),
            },
        )

    def business_rules(self, request):
        _require(request, "jobs.view_job")
        rules = []
        for rule in BUSINESS_RULES.values():
            violations = RuleViolation.objects.filter(rule=rule.name)
            rules.append(
                {
                    "rule": rule,
                    "options": settings.LEITSTAND_BUSINESS_RULES[rule.name],
                    "open": list(violations.filter(resolved_at__isnull=True).order_by("first_seen")[:100]),
                    "open_count": violations.filter(resolved_at__isnull=True).count(),
                    "resolved": list(violations.filter(resolved_at__isnull=False).order_by("-resolved_at")[:10]),
                }
            )
        return TemplateResponse(
            request,
            "admin/console/rules.html",
            {
                **self.each_context(request),
                "title": "Business rules across jobs",
                "rules": rules,
                "every": settings.LEITSTAND_BUSINESS_RULES_SECONDS,
            },
        )

    def dead_letters(self, request):
        _require(request, "jobs.view_job")
        if request.method == "POST":
            try:
                review = dead_letter_review(
                    **{
                        name: request.POST.get(name, "") for name in ("type", "error_class", "step", "decision", "note")
                    },
                    actor=_actor(request),
                    user=request.user,
                )
                messages.success(request, f"Reviewed: {review} — {review.note}")
            except (JobInputError, PermissionDenied) as refused:
                messages.error(request, str(refused))
            return HttpResponseRedirect(request.get_full_path())
        batch, scope = None, {}
        if request.GET.get("batch"):
            batch_id = as_id(request.GET["batch"])
            if batch_id is None or not (batch := Batch.objects.filter(pk=batch_id).first()):
                raise Http404(f"no batch {request.GET['batch'][:40]!r}")
            scope = {"batch": batch.pk}
        every = settings.LEITSTAND_CONSOLE["deadletters_seconds"]
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
        return TemplateResponse(
            request,
            "admin/console/_deadletters_live.html" if request.htmx else "admin/console/deadletters.html",
            {
                **self.each_context(request),
                "title": f"Dead letters of batch {batch.name}" if batch else "Dead letters",
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

    # --- bulk actions on a filter --------------------------------------------------------------

    def bulk(self, request):
        _require(request, "jobs.view_job")
        params = request.POST if request.method == "POST" else request.GET
        action = params.get("action_name") or None  # None: the dry run of the action that fits the filter
        context = {
            **self.each_context(request),
            "title": "Act on every job the filter matches",
            "can_operate": request.user.has_perm("jobs.operate_job"),
            "query": request.GET.urlencode(),
            "query_without_action": urlencode([(k, v) for k, v in request.GET.items() if k != "action_name"]),
        }
        try:
            job_filter = bulk.filter_from(request.GET)
            context.update(job_filter=job_filter, preview=bulk.bulk_preview(action, job_filter), actions=bulk.ACTIONS)
            if request.method == "POST":
                _require(request, "jobs.operate_job")
                if request.POST.get("confirm") != "yes":
                    raise JobInputError(
                        "confirm", "tick the confirmation: it names the action and the jobs it will change"
                    )
                try:
                    confirmed = int(request.POST.get("eligible", ""))
                except ValueError:
                    raise JobInputError("eligible", "the confirmed number of jobs is missing") from None
                operation = bulk.bulk_start(
                    action=action,
                    job_filter=job_filter,
                    actor=_actor(request),
                    reason=request.POST.get("reason", ""),
                    user=request.user,
                    confirmed_eligible=confirmed,
                )
                messages.success(
                    request,
                    f"Bulk operation {operation.pk} started: {operation.eligible} jobs, "
                    f"in batches of {bulk.BATCH}, run by the control process.",
                )
                return HttpResponseRedirect(reverse("admin:dashboard_bulkoperation_change", args=[operation.pk]))
        except JobInputError as refused:
            context["error"] = str(refused)
        return TemplateResponse(request, "admin/console/bulk.html", context)

    # --- trends (the home's charts) ------------------------------------------------------------

    def trends(self, request):
        """The trend charts' series as JSON: ``?type=<job type>`` (default all) ``&range=1h|24h|7d``."""
        _require(request, "jobs.view_job")
        try:
            series = trend_series(job_type=request.GET.get("type", ""), span=request.GET.get("range", "1h"))
        except ValueError as refused:
            return JsonResponse({"error": str(refused)}, status=400)
        return JsonResponse(series)

    # --- pause and resume a pool (from the home) -------------------------------------------------

    def pool_act(self, request, pool):
        """Pause or resume ``pool`` with a reason (POST, operators; audited), then back to the home."""
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
                service(pool=pool, actor=_actor(request), reason=reason, user=request.user)
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

    # --- stuck leases ---------------------------------------------------------------------------

    def stuck_leases(self, request):
        _require(request, "jobs.view_job")
        if request.method == "POST":
            _require(request, "jobs.operate_job")
            reason = request.POST.get("reason", "").strip()
            job_ids = request.POST.getlist("job")
            if not reason:
                messages.error(request, "A reason is required to release leases.")
            else:
                for job_id in job_ids:
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
                            apply=lambda job_id=job_id: _release(
                                job_id, actor=_actor(request), reason=reason, user=request.user
                            ),
                        )
                    except (
                        JobInputError,
                        JobNotFound,
                        PermissionDenied,
                        StaleAttempt,
                        TransitionNotAllowed,
                    ) as refused:
                        result = f"not released: {refused}"
                    messages.info(request, f"{job_id[:8]}: {result}")
            return HttpResponseRedirect(reverse("admin:stuck_leases"))
        return TemplateResponse(
            request,
            "admin/console/_stuck_live.html" if request.htmx else "admin/console/stuck.html",
            {
                **self.each_context(request),
                "title": "Stuck leases",
                "stuck": stuck_leases(),
                "shown_at_most": STUCK_ROWS,
                "can_operate": request.user.has_perm("jobs.operate_job"),
            },
        )


def _require(request, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"this page needs the permission {permission}")


def _actor(request) -> str:
    return f"user:{request.user.get_username()}"


def _release(job_id: str, *, actor: str, reason: str, user) -> str:
    job_release(job_id=job_id, actor=actor, reason=reason, user=user)
    return "released: planned again, due now"


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
