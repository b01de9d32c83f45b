"""Admin pages for the runtime's pools and worker processes, and the pipeline's shared crawl state."""

from __future__ import annotations

from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from dashboard.admin.base import ReadOnlyAdmin
from dashboard.audit import audited
from jobs.display import clock
from jobs.models import OPERATE_PERMISSION
from workers.pipeline.models import HostState, RobotsFile
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.selectors import pools_with_consumers
from workers.runtime.services import pool_pause, pool_resume


@admin.action(description="Pause selected pools (no new work is claimed)…", permissions=["operate"])
def pause_pools(modeladmin, request, queryset):
    return _run_pool_action(modeladmin, request, queryset, pool_pause, "Paused", "pool.pause")


@admin.action(description="Resume selected pools…", permissions=["operate"])
def resume_pools(modeladmin, request, queryset):
    return _run_pool_action(modeladmin, request, queryset, pool_resume, "Resumed", "pool.resume")


def _run_pool_action(modeladmin, request, queryset, service, verb, action):
    """First a page that asks why (the action's second step, as Django's delete confirmation), then
    the change with that reason, audited per pool."""
    names = list(queryset.values_list("name", flat=True))
    reason = request.POST.get("reason", "").strip()
    if not reason:
        return TemplateResponse(
            request,
            "admin/workers/pool/reason.html",
            {
                **modeladmin.admin_site.each_context(request),
                "title": f"{verb[:-1]} pools: why?",
                "verb": verb[:-1].lower(),
                "names": names,
                "action": request.POST.get("action", ""),
                "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
                "opts": modeladmin.model._meta,
                "missing": "reason" in request.POST,
            },
        )
    actor = f"user:{request.user.get_username()}"
    for name in names:

        def apply(name=name):
            service(pool=name, actor=actor, reason=reason, user=request.user)
            return verb.lower()

        audited(
            request, action=action, target=f"pool {name}", reason=reason, permission=OPERATE_PERMISSION, apply=apply
        )
    modeladmin.message_user(request, f"{verb} {', '.join(names)}.", messages.SUCCESS)


@admin.register(Pool)
class PoolAdmin(ReadOnlyAdmin):
    list_display = ("name", "state", "live_consumers", "health", "keys", "changed_at", "changed_by", "reason")
    actions = [pause_pools, resume_pools]

    class Media:
        css = {"all": ["dashboard/console.css"]}

    def get_queryset(self, request):
        return pools_with_consumers()

    @admin.display(description="state", ordering="is_paused")
    def state(self, pool):
        """Running or paused, in words: a check mark under "is paused" read as "broken" (issue 20)."""
        state, css = ("paused", "paused") if pool.is_paused else ("running", "live")
        return format_html('<span class="badge {}">{}</span>', css, state)

    @admin.display(description="flow keys")
    def keys(self, pool):
        return format_html('<a href="{}">keys</a>', reverse("admin:flow_keys", args=[pool.name]))

    @admin.display(description="live consumers", ordering="live_consumers")
    def live_consumers(self, pool):
        return pool.live_consumers

    @admin.display(description="health", ordering="stalled_since")
    def health(self, pool):
        """What the pool's supervisor last reported: a stall its own healing could not end."""
        if pool.stalled_since is None:
            return "claiming"
        return format_html(
            '<span class="badge gone">stalled</span> since {} on {}: {}',
            clock(pool.stalled_since),
            pool.stalled_on,
            pool.stall_note,
        )

    def has_operate_permission(self, request):
        return request.user.has_perm("jobs.operate_job")


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = (
        "host",
        "pid",
        "pool",
        "started_at",
        "last_seen_at",
        "stopped",
        "current_job_id",
        "rss_mb",
        "jobs_done",
        "wakeups",
        "duplicate_wakeups",
    )
    list_filter = ("pool",)
    ordering = ("-last_seen_at",)

    @admin.display(description="stopped", ordering="stopped_at")
    def stopped(self, worker):
        """When and why, as its supervisor saw it (recycled, SIGTERM, killed by SIGKILL, …)."""
        return f"{clock(worker.stopped_at)}: {worker.stop_reason}" if worker.stopped_at else "—"

    @admin.display(description="RSS (MB)", ordering="rss_bytes")
    def rss_mb(self, worker):
        return f"{worker.rss_bytes / 2**20:.0f}"


@admin.register(RobotsFile)
class RobotsFileAdmin(ReadOnlyAdmin):
    list_display = ("origin", "status", "error", "fetched_at", "expires_at")
    search_fields = ("origin",)


@admin.register(HostState)
class HostStateAdmin(ReadOnlyAdmin):
    list_display = (
        "host",
        "next_allowed_at",
        "in_flight_until",
        "consecutive_failures",
        "breaker_open_until",
        "last_outcome",
    )
    search_fields = ("host",)
