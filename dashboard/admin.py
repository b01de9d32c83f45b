"""Admin pages for the job engine's records: read-only, with actions that call jobs.services.

Nothing here writes job state directly; every action goes through a service that checks the
acting user's permission and logs the transition.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django_fsm import TransitionNotAllowed

from jobs import services
from jobs.leases import JobNotFound
from jobs.models import Attempt, Effect, Job, StaleWrite, StepEvent, Transition
from rechecks.models import RecheckPlan
from workers.models import HostState, Pool, RobotsFile, WorkerProcess
from workers.selectors import pools_with_consumers
from workers.services import pool_pause, pool_resume


class ReadOnlyAdmin(admin.ModelAdmin):
    # No exact COUNT(*) over big tables on page load.
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class TransitionInline(admin.TabularInline):
    model = Transition
    fields = ("at", "from_state", "to_state", "lease_version", "cause", "actor")
    readonly_fields = fields
    ordering = ("id",)
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class AttemptInline(TransitionInline):
    model = Attempt
    fields = ("lease_version", "lease_owner", "claimed_at", "started_at", "heartbeat_at", "finished_at",
              "outcome", "error_class", "refused_writes")
    readonly_fields = fields
    ordering = ("-lease_version",)


class StepEventInline(TransitionInline):
    model = StepEvent
    fields = ("lease_version", "step", "outcome", "started_at", "duration_ms", "data")
    readonly_fields = fields
    ordering = ("lease_version", "id")


class RecheckPlanInline(admin.StackedInline):
    model = RecheckPlan
    fk_name = "job"
    fields = ("state", "end_reason", "end_note", "sequence", "next_check_at", "next_check_reason", "deadline_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


def _run_action(modeladmin, request, queryset, service, verb: str, reason: str):
    done, refused = 0, []
    for job_id in queryset.values_list("pk", flat=True):
        try:
            service(job_id=job_id, actor=f"user:{request.user.get_username()}", reason=reason, user=request.user)
            done += 1
        except (TransitionNotAllowed, PermissionDenied, JobNotFound) as exc:
            refused.append(str(exc))
    if done:
        modeladmin.message_user(request, f"{verb} {done} job(s).", messages.SUCCESS)
    for message in refused[:10]:
        modeladmin.message_user(request, message, messages.WARNING)
    if len(refused) > 10:
        modeladmin.message_user(request, f"… and {len(refused) - 10} more refused.", messages.WARNING)


@admin.action(description="Cancel selected jobs", permissions=["operate"])
def cancel_jobs(modeladmin, request, queryset):
    _run_action(modeladmin, request, queryset, services.job_cancel, "Cancelled", "cancelled from the console")


@admin.action(description="Retry selected failed or dead jobs now", permissions=["operate"])
def retry_jobs_now(modeladmin, request, queryset):
    _run_action(modeladmin, request, queryset, services.job_retry_now, "Retried", "retried from the console")


admin.site.site_header = "Leitstand"
admin.site.site_title = "Leitstand"
admin.site.index_title = "Operations console"


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("short_id", "type", "state", "priority", "attempt", "lease_owner", "due_at", "state_changed_at",
                    "error_class")
    list_display_links = ("short_id",)
    list_filter = ("state", "type", "priority")
    search_fields = ("=id", "=correlation_id", "=idempotency_key")
    ordering = ("-created_at",)
    actions = [cancel_jobs, retry_jobs_now]
    inlines = [AttemptInline, StepEventInline, TransitionInline, RecheckPlanInline]

    def has_operate_permission(self, request):
        return request.user.has_perm("jobs.operate_job")

    @admin.display(description="job", ordering="id")
    def short_id(self, job):
        return str(job.id)[:8]

    @admin.display(description="attempt")
    def attempt(self, job):
        return f"{job.attempts}/{job.max_attempts}"


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("job", "lease_version", "lease_owner", "claimed_at", "finished_at", "outcome", "refused_writes")
    list_filter = ("outcome", "pool")


@admin.register(Transition)
class TransitionAdmin(ReadOnlyAdmin):
    list_display = ("at", "job", "from_state", "to_state", "lease_version", "cause", "actor")
    list_filter = ("to_state",)


@admin.register(StaleWrite)
class StaleWriteAdmin(ReadOnlyAdmin):
    list_display = ("at", "job", "operation", "lease_version", "current_lease_version", "current_state")


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ("applied_at", "key", "kind", "job", "lease_version")
    search_fields = ("=key",)


@admin.register(StepEvent)
class StepEventAdmin(ReadOnlyAdmin):
    list_display = ("job", "lease_version", "step", "outcome", "started_at", "duration_ms")
    list_filter = ("outcome", "step")


@admin.action(description="Pause selected pools (no new work is claimed)", permissions=["operate"])
def pause_pools(modeladmin, request, queryset):
    _run_pool_action(modeladmin, request, queryset, pool_pause, "Paused")


@admin.action(description="Resume selected pools", permissions=["operate"])
def resume_pools(modeladmin, request, queryset):
    _run_pool_action(modeladmin, request, queryset, pool_resume, "Resumed")


def _run_pool_action(modeladmin, request, queryset, service, verb):
    actor = f"user:{request.user.get_username()}"
    names = list(queryset.values_list("name", flat=True))
    for name in names:
        service(pool=name, actor=actor, reason=f"{verb.lower()} from the console")
    modeladmin.message_user(request, f"{verb} {', '.join(names)}.", messages.SUCCESS)


@admin.register(Pool)
class PoolAdmin(ReadOnlyAdmin):
    list_display = ("name", "is_paused", "live_consumers", "changed_at", "changed_by", "reason")
    actions = [pause_pools, resume_pools]

    def get_queryset(self, request):
        return pools_with_consumers()

    @admin.display(description="live consumers", ordering="live_consumers")
    def live_consumers(self, pool):
        return pool.live_consumers

    def has_operate_permission(self, request):
        return request.user.has_perm("jobs.operate_job")


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = ("host", "pid", "pool", "started_at", "last_seen_at", "current_job_id", "rss_mb", "jobs_done",
                    "wakeups", "duplicate_wakeups")
    list_filter = ("pool",)
    ordering = ("-last_seen_at",)

    @admin.display(description="RSS (MB)", ordering="rss_bytes")
    def rss_mb(self, worker):
        return f"{worker.rss_bytes / 2**20:.0f}"


@admin.register(RobotsFile)
class RobotsFileAdmin(ReadOnlyAdmin):
    list_display = ("origin", "status", "error", "fetched_at", "expires_at")
    search_fields = ("origin",)


@admin.register(HostState)
class HostStateAdmin(ReadOnlyAdmin):
    list_display = ("host", "next_allowed_at", "in_flight_until", "consecutive_failures", "breaker_open_until",
                    "last_outcome")
    search_fields = ("host",)

from . import admin_pipeline  # noqa: E402,F401  (the pipeline's pages)
from . import admin_rechecks  # noqa: E402,F401  (recheck plans)
