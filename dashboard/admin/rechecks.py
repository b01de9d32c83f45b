"""Admin pages for recheck plans: the plan with its policy, progress and observation history, and
the two ways a person ends a plan — a manual decision or an abort — each with a required reason."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from dashboard.admin.base import ReadOnlyAdmin, ReadOnlyInline
from dashboard.audit import audited
from jobs.selectors import short_id as id_short
from jobs.services import JobInputError
from rechecks.models import Observation, RecheckPlan
from rechecks.policy import duration
from rechecks.services import plan_abort, plan_decide


class ObservationInline(ReadOnlyInline):
    model = Observation
    fields = (
        "sequence",
        "observed_at",
        "http_status",
        "kind",
        "match_score",
        "content_hash",
        "detail",
        "decision",
        "next_check_at",
        "job",
    )
    readonly_fields = fields
    ordering = ("sequence",)


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=400,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Recorded on the plan and in the case's transition log.",
    )


def _end_plans(modeladmin, request, queryset, *, service, action: str, permission: str, title: str, explanation: str):
    form = ReasonForm(request.POST if "apply" in request.POST else None)
    if form.is_bound and form.is_valid():
        actor = f"user:{request.user.get_username()}"
        ended, refused = 0, []
        for plan_id in queryset.values_list("pk", flat=True):
            reason = form.cleaned_data["reason"]

            def apply(plan_id=plan_id, reason=reason):
                service(plan_id=plan_id, actor=actor, reason=reason, user=request.user)
                return "ended"

            try:
                audited(
                    request,
                    action=f"plan.{action.removesuffix('_plans')}",
                    target=f"recheck plan {plan_id}",
                    reason=reason,
                    permission=permission,
                    apply=apply,
                )
                ended += 1
            except (JobInputError, PermissionDenied) as exc:
                refused.append(str(exc))
        if ended:
            modeladmin.message_user(request, f"{title}: {ended} plan(s).", messages.SUCCESS)
        for message in refused:
            modeladmin.message_user(request, message, messages.WARNING)
        return None
    return TemplateResponse(
        request,
        "admin/rechecks/end_plans.html",
        {
            **modeladmin.admin_site.each_context(request),
            "opts": modeladmin.model._meta,
            "title": title,
            "explanation": explanation,
            "plans": list(queryset),
            "form": form,
            "action": action,
        },
    )


@admin.action(description="End with a manual decision (the case is confirmed)", permissions=["decide"])
def decide_plans(modeladmin, request, queryset):
    return _end_plans(
        modeladmin,
        request,
        queryset,
        service=plan_decide,
        action="decide_plans",
        permission="rechecks.decide_plan",
        title="End with a manual decision",
        explanation="The plans end now and their cases are confirmed (done). Say why.",
    )


@admin.action(description="Abort (the case is cancelled)", permissions=["abort"])
def abort_plans(modeladmin, request, queryset):
    return _end_plans(
        modeladmin,
        request,
        queryset,
        service=plan_abort,
        action="abort_plans",
        permission="rechecks.abort_plan",
        title="Abort recheck plans",
        explanation="The plans stop and their cases are cancelled. Document the reason.",
    )


@admin.register(RecheckPlan)
class RecheckPlanAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "state",
        "end_reason",
        "url",
        "sequence",
        "interval",
        "next_check_at",
        "next_check_reason",
        "deadline_at",
        "case_link",
    )
    list_filter = ("state", "end_reason", "target")
    search_fields = ("=correlation_id", "url")
    ordering = ("state", "next_check_at")
    inlines = [ObservationInline]
    actions = [decide_plans, abort_plans]
    fieldsets = (
        (None, {"fields": ("job", "finding", "asset", "correlation_id", "url", "target", "state", "created_at")}),
        (
            "Progress",
            {
                "fields": (
                    "sequence",
                    "interval_seconds",
                    "unchanged_count",
                    "confirmations",
                    "next_check_at",
                    "next_check_reason",
                    "current_job",
                    "last_content_hash",
                )
            },
        ),
        (
            "Policy",
            {
                "fields": (
                    "first_delay_seconds",
                    "min_interval_seconds",
                    "max_interval_seconds",
                    "widen_factor",
                    "early_seconds",
                    "jitter",
                    "confirmations_required",
                    "deadline_at",
                )
            },
        ),
        ("End", {"fields": ("ended_at", "end_reason", "end_note", "ended_by", "case_settled")}),
    )

    def has_decide_permission(self, request):
        return request.user.has_perm("rechecks.decide_plan")

    def has_abort_permission(self, request):
        return request.user.has_perm("rechecks.abort_plan")

    @admin.display(description="interval", ordering="interval_seconds")
    def interval(self, plan):
        return duration(plan.interval_seconds)

    @admin.display(description="case")
    def case_link(self, plan):
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:jobs_job_change", args=[plan.job_id]), id_short(plan.job_id)
        )


@admin.register(Observation)
class ObservationAdmin(ReadOnlyAdmin):
    list_display = (
        "observed_at",
        "plan",
        "sequence",
        "http_status",
        "kind",
        "match_score",
        "decision",
        "next_check_at",
    )
    list_filter = ("kind",)
