"""Admin pages for batches: the list with a progress bar per batch and the sizing rule per pool; the
batch page with its counters, members ended over time, the measured rate, the ETA against the
target and, once finished, its statistics."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Sum
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from dashboard.admin.base import ReadOnlyAdmin
from dashboard.display import as_id
from dashboard.operations.deadletters import dead_letter_groups
from dashboard.templatetags.console import progress_bar
from jobs.batches import COUNTERS, Progress, batch_eta, batch_progress, batch_timeline
from jobs.display import ago
from jobs.models import Batch, database_now
from workers.runtime import options as runtime_options
from workers.runtime.sizing import batch_size_recommendations


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "key",
        "batch_state",
        "progress",
        "created_at",
        "target_finish_at",
        "finished_at",
        "created_by",
    )
    search_fields = ("=key", "name")
    ordering = ("-id",)
    fields = ("key", "name", "correlation_id", "created_by", "created_at", "target_finish_at", "finished_at", "stats")
    readonly_fields = fields
    change_form_template = "admin/jobs/batch/console_change_form.html"
    change_list_template = "admin/jobs/batch/console_change_list.html"

    class Media:
        css = {"all": ["dashboard/console.css"]}

    def get_queryset(self, request):
        # The counters' sums in the list's own query (one GROUP BY over the page's batches).
        return super().get_queryset(request).annotate(**{f"sum_{name}": Sum(f"counters__{name}") for name in COUNTERS})

    @admin.display(description="state")
    def batch_state(self, batch):
        return "finished" if batch.finished_at else "running"

    @admin.display(description="progress")
    def progress(self, batch):
        counts = Progress(**{name: getattr(batch, f"sum_{name}", 0) or 0 for name in COUNTERS})
        return format_html("{} {}/{}", progress_bar(counts), counts.ended, counts.total)

    def changelist_view(self, request, extra_context=None):
        target = 15
        sizing = batch_size_recommendations(pools=list(runtime_options.current().pools), target_minutes=target)
        return super().changelist_view(request, {**(extra_context or {}), "sizing": sizing, "target_minutes": target})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        batch_id = as_id(object_id)
        batch = Batch.objects.filter(pk=batch_id).first() if batch_id is not None else None
        context = dict(extra_context or {})
        if batch is not None:
            progress = batch_progress(batch.pk)
            bucket, timeline = batch_timeline(batch)
            top = max((count for _, count in timeline), default=0) or 1
            context.update(
                progress=progress,
                eta=batch_eta(batch, progress, database_now()),
                timeline=[
                    {
                        "at": at,
                        "count": count,
                        "x": i * 14,
                        "height": round(60 * count / top),
                        "y": 60 - round(60 * count / top),
                    }
                    for i, (at, count) in enumerate(timeline)
                ],
                timeline_width=14 * len(timeline),
                timeline_top=max((count for _, count in timeline), default=0),
                bucket=ago(bucket.total_seconds()),
                members_url=reverse("admin:jobs_job_changelist") + f"?batch={batch.pk}",
                dead_letters=dead_letter_groups(batch_id=batch.pk)[:10],
                dead_letters_url=reverse("admin:dead_letters") + f"?batch={batch.pk}",
            )
            if request.htmx:  # the live part alone (templates/admin/jobs/batch/_progress.html)
                if not self.has_view_permission(request, batch):
                    raise PermissionDenied("seeing a batch needs the permission to view batches")
                context["original"] = batch
                return TemplateResponse(request, "admin/jobs/batch/_progress.html", context)
        return super().change_view(request, object_id, form_url, context)
