"""Admin pages for the console's own records: bulk operations, alerts and the audit log."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html

from alerts.evaluation import alert_acknowledge, alert_resolve
from alerts.models import Alert, AlertEvent
from alerts.routes import route_named
from alerts.silences import ActiveSilences
from dashboard.admin.base import ReadOnlyAdmin, ReadOnlyInline
from dashboard.display import as_id
from dashboard.models import BulkOperation
from dashboard.pages.routes import SILENCE_CHOICES
from jobs.display import ago, clock
from jobs.models import AuditEntry, database_now
from jobs.services import JobInputError


@admin.register(BulkOperation)
class BulkOperationAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "actor",
        "action",
        "filter",
        "state",
        "progress",
        "changed",
        "skipped",
        "eligible",
        "reason",
        "last_error",
    )
    list_filter = ("state", "action")
    ordering = ("-created_at",)

    @admin.display(description="progress")
    def progress(self, operation):
        return format_html('<progress max="100" value="{}"></progress> {} %', operation.percent, operation.percent)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        operation = BulkOperation.objects.filter(pk=object_id).first()
        return super().change_view(
            request,
            object_id,
            form_url,
            {**(extra_context or {}), "refresh": operation is not None and operation.state == "running"},
        )


class AlertEventInline(ReadOnlyInline):
    model = AlertEvent
    fields = ("at", "kind", "actor", "comment")
    readonly_fields = fields
    ordering = ("id",)


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ("state_shown", "rule_and_scope", "fired_at", "last_seen_ago", "diagnosis_and_runbook", "route")
    list_filter = ("state", "rule", "route")
    ordering = ("state", "-last_seen")
    inlines = [AlertEventInline]
    change_form_template = "admin/alerts/alert/console_change_form.html"
    # The list is a live part: it polls its own URL and swaps in the rows of the answer (hx-select).
    change_list_template = "admin/alerts/alert/console_change_list.html"

    def get_urls(self):
        return [
            path("<int:alert_id>/act/", self.admin_site.admin_view(self.act), name="alerts_alert_act"),
            *super().get_urls(),
        ]

    def act(self, request, alert_id):
        if request.method == "POST":
            actor, comment = f"user:{request.user.get_username()}", request.POST.get("comment", "")
            service = alert_acknowledge if request.POST.get("action") == "acknowledge" else alert_resolve
            try:
                alert = service(alert_id=alert_id, actor=actor, comment=comment, user=request.user)
                messages.success(request, f"Alert {alert.pk} {alert.state}.")
            except (JobInputError, PermissionDenied) as refused:
                messages.error(request, str(refused))
        return HttpResponseRedirect(reverse("admin:alerts_alert_change", args=[alert_id]))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        alert_id = as_id(object_id)
        alert = Alert.objects.filter(pk=alert_id).first() if alert_id is not None else None
        return super().change_view(
            request,
            object_id,
            form_url,
            {
                **(extra_context or {}),
                "can_operate": request.user.has_perm("jobs.operate_job"),
                "route": route_named(alert.route) if alert else None,
                "silence": ActiveSilences()(alert) if alert else None,
                "silence_choices": SILENCE_CHOICES,
            },
        )

    def changelist_view(self, request, extra_context=None):
        self._now = database_now()
        return super().changelist_view(request, {"title": "Alerts", **(extra_context or {})})

    @admin.display(description="state", ordering="state")
    def state_shown(self, alert):
        return format_html(
            '<span class="badge state-{}" data-key="alert:{}">{}</span>', alert.state, alert.pk, alert.state
        )

    @admin.display(description="rule · scope", ordering="rule")
    def rule_and_scope(self, alert):
        return format_html("<strong>{}</strong><br>{}", alert.rule, alert.scope or "all")

    @admin.display(description="last seen", ordering="last_seen")
    def last_seen_ago(self, alert):
        seconds = (self._now - alert.last_seen).total_seconds()
        return format_html('<span title="{}">{} ago</span>', clock(alert.last_seen), ago(seconds))

    @admin.display(description="diagnosis")
    def diagnosis_and_runbook(self, alert):
        return format_html(
            '{} <a href="{}" class="nowrap">runbook →</a>', alert.diagnosis, reverse("admin:runbook", args=[alert.rule])
        )


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "action", "target", "reason", "result")
    list_filter = ("action",)
    search_fields = ("actor", "target")
    ordering = ("-at",)
