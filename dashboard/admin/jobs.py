"""Admin pages for the job engine's records: read-only, with actions that call jobs.services.

Nothing here writes job state directly; every action goes through a service that checks the
acting user's permission and logs the transition.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters, messages
from django.core.exceptions import EmptyResultSet, PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Count, Q
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django_fsm import TransitionNotAllowed

from dashboard import options
from dashboard.admin.base import ReadOnlyAdmin
from dashboard.audit import audited
from dashboard.diagram import state_diagram
from dashboard.display import as_id
from dashboard.explain import job_explain
from dashboard.operations.deadletters import STEP, ended_in_step
from dashboard.paths import attempt_timeline
from history import options as history_options
from history.archive import AUDIT, ArchiveUnreadable, archived_document
from history.export import export_json, job_export_json
from history.models import ArchivedJob, ArchiveFile
from jobs import leases, logs, services, tracing
from jobs.display import ago
from jobs.leases import JobNotFound
from jobs.models import (
    OPERATE_PERMISSION,
    Attempt,
    DeposedWrite,
    Effect,
    Job,
    LeaderLease,
    StaleWrite,
    State,
    StepEvent,
    Transition,
    database_now,
)
from jobs.records import job_record
from jobs.selectors import short_id as id_short
from jobs.selectors import short_id_query, subject_prefix
from jobs.services import JobInputError
from workers.pipeline.models import Source
from workers.runtime import options as runtime_options
from workers.runtime.registry import registry

# What the job page shows of the job's record (its audit entries are the audit log's page).
RECORD_PAGE_PARTS = ("attempts", "step_events", "transitions", "effects", "stale_writes", "findings", "recheck_plan")


def _run_action(modeladmin, request, queryset, service, verb: str, reason: str, action: str):
    done, refused = 0, []
    actor = f"user:{request.user.get_username()}"
    for job_id in queryset.values_list("pk", flat=True):

        def apply(job_id=job_id):
            return f"now {service(job_id=job_id, actor=actor, reason=reason, user=request.user).state}"

        try:
            audited(
                request,
                action=action,
                target=f"job {job_id}",
                reason=reason,
                permission=OPERATE_PERMISSION,
                apply=apply,
            )
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
    _run_action(
        modeladmin, request, queryset, services.job_cancel, "Cancelled", "cancelled from the console", "job.cancel"
    )


@admin.action(description="Retry selected failed or dead jobs now", permissions=["operate"])
def retry_jobs_now(modeladmin, request, queryset):
    _run_action(
        modeladmin, request, queryset, services.job_retry_now, "Retried", "retried from the console", "job.retry_now"
    )


class EstimatedCountPaginator(Paginator):
    """Never an exact COUNT(*) over millions of rows: the count is PostgreSQL's estimate (the table's
    row estimate unfiltered, the planner's row estimate for a filter), and an exact count only when
    the planner expects few rows, capped at ``CAP`` + 1."""

    CAP = 1_000

    @cached_property
    def count(self) -> int:
        query = self.object_list.order_by()
        if not query.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [query.model._meta.db_table]
                )
                row = cursor.fetchone()
            if row and row[0] > self.CAP:
                return int(row[0])
        else:
            try:
                sql, params = query.query.sql_with_params()
            except EmptyResultSet:  # a filter that matches nothing by construction (queryset.none())
                return 0
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
                plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            estimate = int(plan[0]["Plan"]["Plan Rows"])
            if estimate > self.CAP:
                return estimate
        return query[: self.CAP + 1].count()


class TypeFilter(admin.SimpleListFilter):
    """The registered types (no SELECT DISTINCT over millions of jobs)."""

    title, parameter_name = "type", "type__exact"

    def lookups(self, request, model_admin):
        return [(t.name, t.name) for t in registry.all()]

    def queryset(self, request, queryset):
        return queryset.filter(type=self.value()) if self.value() else queryset


class PriorityFilter(admin.SimpleListFilter):
    title, parameter_name = "priority", "priority__exact"

    def lookups(self, request, model_admin):
        return [(str(p), f"{p}{' (most urgent)' if p == 0 else ' (bulk)' if p == 9 else ''}") for p in range(10)]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        if self.value() not in {str(p) for p in range(10)}:  # the admin answers with its error page, no 500
            raise IncorrectLookupParameters(f"priority must be 0-9, not {self.value()[:20]!r}")
        return queryset.filter(priority=int(self.value()))


class LinkFilter(admin.SimpleListFilter):
    """A filter the console's links set (``?parent=``, ``?batch=``, ``?step=``). Shown in the sidebar
    only while it is applied — with its one value, and "All" to clear it: Django applies only the
    filters that have output, so a hidden filter would silently list every job. A value that cannot
    match (a malformed ID) lists nothing."""

    def lookups(self, request, model_admin):
        return [(self.value(), self.value())] if self.value() else []

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        condition = self.condition(self.value())
        return queryset.none() if condition is None else queryset.filter(condition)

    def condition(self, value: str):
        """A condition for ``QuerySet.filter`` (a ``Q`` or a boolean expression), or None: matches nothing."""
        raise NotImplementedError


class SubjectFilter(LinkFilter):
    """``?subject=<prefix>``: jobs about a URL (or plan) starting with it (the subject's prefix index)."""

    title, parameter_name = "about", "subject"

    def condition(self, value):
        return subject_prefix(value)


class ParentFilter(LinkFilter):
    """``?parent=<job id>``: the children of a job (linked from the job page)."""

    title, parameter_name = "parent", "parent"

    def condition(self, value):
        try:
            return Q(parent_id=uuid.UUID(value))
        except ValueError:
            return None


class BatchFilter(LinkFilter):
    """``?batch=<id>``: a batch's members (linked from the batch page)."""

    title, parameter_name = "batch", "batch"

    def condition(self, value):
        batch_id = as_id(value)
        return Q(batch_id=batch_id) if batch_id is not None else None


class StepFilter(LinkFilter):
    """``?step=<name>``: jobs whose latest attempt ended in that step (linked from the dead letters)."""

    title, parameter_name = "ended in step", "step"

    def condition(self, value):
        return ended_in_step(value) if STEP.fullmatch(value) else None


class PoolFilter(admin.SimpleListFilter):
    title, parameter_name = "pool", "pool"

    def lookups(self, request, model_admin):
        return [(name, name) for name in runtime_options.current().pools]

    def queryset(self, request, queryset):
        return queryset.filter(pool=self.value()) if self.value() else queryset


class SourceFilter(admin.SimpleListFilter):
    title, parameter_name = "source", "source"

    def lookups(self, request, model_admin):
        return [(name, name) for name in Source.objects.order_by("name").values_list("name", flat=True)]

    def queryset(self, request, queryset):
        return queryset.filter(source=self.value()) if self.value() else queryset


def job_path_context(job: Job, record: dict) -> dict:
    """The job page's path section: the newest attempt's path and step timeline, and the state
    diagram with the job's own transitions (from its ``record``) lit."""
    attempt = job.attempt_log.order_by("-lease_version").first()
    pairs = {(t["from_state"], t["to_state"]) for t in record["transitions"] if t["from_state"]}
    return {
        "path_attempt": attempt,
        "log_limit": logs.LINES_KEPT,
        "timeline": attempt_timeline(job, attempt) if attempt else None,
        "diagram": state_diagram(pairs, job.state),
        "shadow_runs": list(job.shadow_runs.order_by("-id")[:10]),
    }


# A job page keeps itself current while the job can still move by itself (not once it ended).
LIVE_STATES = tuple(state for state in State if state not in (State.DONE, State.DEAD, State.CANCELLED))

# Console actions on one job: (label, permission, service).
JOB_ACTIONS = {
    "retry_now": ("Retry now", OPERATE_PERMISSION),
    "cancel": ("Cancel", OPERATE_PERMISSION),
    "confirm": ("Confirm the outcome", OPERATE_PERMISSION),
    "release": ("Release the lease", OPERATE_PERMISSION),
    "review": ("Send to review", OPERATE_PERMISSION),
    "reorder": ("Move in line", OPERATE_PERMISSION),
    "hold": ("Hold", OPERATE_PERMISSION),
    "resume": ("Resume", OPERATE_PERMISSION),
}


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "short_id",
        "type",
        "state_badge",
        "priority",
        "attempt",
        "about",
        "correlation",
        "age",
        "in_state_for",
        "heartbeat_age",
        "next_attempt",
        "error",
    )
    list_display_links = ("short_id",)
    list_filter = (
        "state",
        TypeFilter,
        PoolFilter,
        PriorityFilter,
        SourceFilter,
        SubjectFilter,
        ParentFilter,
        BatchFilter,
        StepFilter,
    )
    extra_lookups = ("error_class", "finished_at__gt")  # the dead-letter groups' links
    search_fields = ("=id", "=correlation_id", "=idempotency_key")
    ordering = ("-created_at",)
    paginator = EstimatedCountPaginator
    # Rendering, not SQL, is the list's cost (4 ms of SQL, ~1 ms of Python a row on the 2-core
    # machine): 50 rows keep the page well under 150 ms (docs/performance.md, run 5).
    list_per_page = 50
    actions = [cancel_jobs, retry_jobs_now]
    readonly_fields = ("children", "attempts_counted", "trace")
    change_form_template = "admin/jobs/job/console_change_form.html"

    def get_object(self, request, object_id, from_field=None):
        job = getattr(request, "console_job", None)
        if job is not None and from_field is None and str(job.pk) == str(object_id):
            return job
        return super().get_object(request, object_id, from_field)

    def get_fields(self, request, obj=None):
        """The record's fields, with the attempts counter explained where it is (not at the end)."""
        # The trace context's two columns are shown as the one trace, beside the correlation ID.
        fields = [
            f
            for f in super().get_fields(request, obj)
            if f not in ("attempts_counted", "trace", "trace_parent", "trace_state")
        ]
        after = {"attempts": ("attempts", "attempts_counted"), "correlation_id": ("correlation_id", "trace")}
        return [name for f in fields for name in after.get(f, (f,))]

    @admin.display(description="trace")
    def trace(self, job):
        """The W3C trace it was created in, linked to the tracing system when LEITSTAND_TRACE_URL is set."""
        trace_id = tracing.trace_id(job.trace_parent)
        if not trace_id:
            return "none (created outside any trace)"
        link = options.current().trace_link(trace_id)
        return format_html('<a href="{}" rel="noreferrer">{}</a>', link, trace_id) if link else trace_id

    @admin.display(description="attempt rows")
    def attempts_counted(self, job):
        rows = job.attempt_rows if hasattr(job, "attempt_rows") else job.attempt_log.count()
        if rows == job.attempts:
            return f"{rows}, each counted against the retry budget ({job.max_attempts})"
        return (
            f"{rows} attempts below, {job.attempts} of them counted against the retry budget ({job.max_attempts}): "
            "a retry now starts the count afresh, and a lease handed back (a stopping pool, a politeness "
            "deferral) or taken from a worker that died before it started keeps the job's place without "
            "spending an attempt"
        )

    change_list_template = "admin/jobs/job/console_change_list.html"

    def get_search_results(self, request, queryset, search_term):
        # Correlation IDs and keys are matched exactly, subjects by their prefix (the subject index), IDs
        # exactly, by the lists' short IDs (01a24deb…a13f9c) or by a prefix of at least 6 hex digits (a
        # range on the primary key); a malformed ID is not an error.
        term = search_term.strip()
        if not term:
            return queryset, False
        query = Q(correlation_id=term) | Q(idempotency_key=term) | subject_prefix(term)
        if job_id := _as_uuid(term):
            query |= Q(id=job_id)
        elif (short := short_id_query(term)) is not None:
            query |= short
        return queryset.filter(query), False

    def get_urls(self):
        return [
            path("<uuid:job_id>/act/", self.admin_site.admin_view(self.act), name="jobs_job_act"),
            path("<uuid:job_id>/export/", self.admin_site.admin_view(self.export), name="jobs_job_export"),
            *super().get_urls(),
        ]

    def export(self, request, job_id):
        if not self.has_view_permission(request):
            raise PermissionDenied("exporting a job needs the permission to view jobs")
        job = Job.objects.filter(pk=job_id).first()
        if job is None:
            raise Http404(f"no job {job_id}")
        response = HttpResponse(job_export_json(job), content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.json"'
        return response

    def changelist_view(self, request, extra_context=None):
        if request.htmx:  # the live part: the state tabs and their counts
            if not self.has_view_permission(request):
                raise PermissionDenied("the jobs list needs the permission to view jobs")
            return TemplateResponse(request, "admin/jobs/job/state_tabs_live.html", {"request": request})
        self._now = database_now()
        context = {"title": "Jobs", **(extra_context or {})}
        term = request.GET.get("q", "").strip()
        job_id = _as_uuid(term)
        matches = Q(correlation_id=term) | Q(job_id=job_id) if job_id else Q(correlation_id=term)
        archived = list(ArchivedJob.objects.select_related("file").filter(matches)[:20]) if term else []
        if archived:  # jobs that left the database are found in the archive
            context["archived"] = archived
        elif term and ArchiveFile.objects.filter(indexed=False).exclude(job_type=AUDIT).exists():
            context["archive_index_days"] = history_options.current().archive_index_days
        return super().changelist_view(request, context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if _as_uuid(object_id) is None:  # a short ID: its one job, the jobs it could be, or none
            return self._short_id(request, object_id)
        job = Job.objects.filter(pk=object_id).annotate(attempt_rows=Count("attempt_log")).first()
        request.console_job = job  # get_object hands the admin this one: the page reads the job once
        if job is None and (archived := self._archived_page(request, object_id)) is not None:
            return archived
        context = dict(extra_context or {})
        if job is not None:
            context.update(
                why=job_explain(job, now=database_now()),
                actions_now=self.actions_now(request, job),
                lanes=range(10),
                console_time_zone=timezone.get_current_timezone_name(),
                live_states=LIVE_STATES,
            )
            if request.htmx:  # the live part alone (templates/admin/jobs/job/_live.html)
                if not self.has_view_permission(request, job):
                    raise PermissionDenied("seeing a job needs the permission to view jobs")
                context.update(original=job, live_refresh=True)
                return TemplateResponse(request, "admin/jobs/job/_live.html", context)
            # Its attempts, steps, transitions, effects, findings and plan: the job's record, as the
            # API and the export read it (jobs/records.py; templates/admin/jobs/job/_record.html).
            record = job_record(job.pk, parts=RECORD_PAGE_PARTS).parts
            context.update(record=record, **job_path_context(job, record))
        return super().change_view(request, object_id, form_url, context)

    def _short_id(self, request, object_id: str):
        if not self.has_view_permission(request):
            raise PermissionDenied("finding a job needs the permission to view jobs")
        query = short_id_query(object_id)
        if query is None:
            raise Http404(
                f"{object_id!r} is not a job ID: give the whole ID, its short form (01a24deb…a13f9c) or at least "
                "its first 6 hex digits"
            )
        found = list(Job.objects.filter(query).values_list("pk", flat=True)[:2])
        if not found:
            archived = ArchivedJob.objects.filter(short_id_query(object_id, field="job_id")).first()
            if archived is None:
                raise Http404(f"no job ID starts with {object_id}")
            found = [archived.job_id]
        if len(found) == 1:
            return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[found[0]]))
        return HttpResponseRedirect(f"{reverse('admin:jobs_job_changelist')}?{urlencode({'q': object_id})}")

    def _archived_page(self, request, object_id):
        """A job that left the database, read-only from its archive file ("archived on …")."""
        try:
            found = archived_document(object_id)
        except ArchiveUnreadable as unreadable:
            found, error = None, str(unreadable)
        else:
            error = ""
        if found is None and not error:
            return None
        entry, document = found if found else (ArchivedJob.objects.select_related("file").get(job_id=object_id), None)
        return TemplateResponse(
            request,
            "admin/jobs/job/archived.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": f"Archived job {object_id}",
                "entry": entry,
                "document": document,
                "document_json": export_json(document) if document else "",
                "log_limit": logs.LINES_KEPT,
                "error": error,
            },
        )

    def actions_now(self, request, job) -> list[dict]:
        """The actions this person may take on this job now, from the FSM and their permissions."""
        allowed = {t.name for t in job.get_available_state_transitions()}
        possible = {
            "retry_now": "retry_now" in allowed,
            "cancel": "cancel" in allowed,
            "confirm": "confirm" in allowed,
            "release": job.state in (State.RESERVED, State.RUNNING),
            "review": job.state in leases.sources_of("queue_for_review"),
            "reorder": job.state == State.PLANNED,
            "hold": "hold" in allowed,
            "resume": "resume" in allowed,
        }
        actions = [
            {"name": name, "label": label}
            for name, (label, permission) in JOB_ACTIONS.items()
            if possible[name] and request.user.has_perm(permission)
        ]
        if job.state == State.READY_FOR_REVIEW and request.user.has_perm("jobs.review_job"):
            actions.append(
                {
                    "name": "decide",
                    "label": "Decide in the review workspace",
                    "url": reverse("admin:review_case", args=[job.id]),
                }
            )
        return actions

    def act(self, request, job_id):
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[job_id]))
        name, reason = request.POST.get("action", ""), request.POST.get("reason", "").strip()
        actor = f"user:{request.user.get_username()}"
        try:
            if name not in JOB_ACTIONS:
                raise JobInputError("action", f"unknown action {name!r}")
            result = audited(
                request,
                action=f"job.{name}",
                target=f"job {job_id}",
                reason=reason,
                permission=JOB_ACTIONS[name][1],
                apply=lambda: _job_act(name, job_id, actor=actor, reason=reason, user=request.user, form=request.POST),
            )
            messages.success(request, result)
        except (JobInputError, TransitionNotAllowed, PermissionDenied, JobNotFound, leases.StaleAttempt) as refused:
            messages.error(request, f"refused: {refused}")
        return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[job_id]))

    def has_operate_permission(self, request):
        return request.user.has_perm("jobs.operate_job")

    @admin.display(description="children")
    def children(self, job):
        counts = dict(Job.objects.filter(parent=job).order_by().values_list("state").annotate(n=Count("id")))
        if not counts:
            return "none"
        summary = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in sorted(counts.items()))
        url = reverse("admin:jobs_job_changelist") + f"?parent={job.id}"
        return format_html('<a href="{}">{} child jobs</a>: {}', url, sum(counts.values()), summary)

    @admin.display(description="job", ordering="id")
    def short_id(self, job):
        return id_short(job.id)

    @admin.display(description="state", ordering="state")
    def state_badge(self, job):
        return format_html('<span class="badge state-{}">{}</span>', job.state, job.state.replace("_", " "))

    @admin.display(description="attempt")
    def attempt(self, job):
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="age", ordering="created_at")
    def age(self, job):
        return ago((self._now - job.created_at).total_seconds())

    @admin.display(description="in state for", ordering="state_changed_at")
    def in_state_for(self, job):
        return ago((self._now - job.state_changed_at).total_seconds())

    @admin.display(description="heartbeat")
    def heartbeat_age(self, job):
        if not job.heartbeat_at:
            return "—"
        return format_html(
            '<span title="lease owner {}">{} ago</span>',
            job.lease_owner or "none",
            ago((self._now - job.heartbeat_at).total_seconds()),
        )

    @admin.display(description="about", ordering="subject")
    def about(self, job):
        """What the job is about (its subject: the URL it fetches or analyses, its plan), else its source."""
        return _clipped(job.subject or job.source, 48)

    @admin.display(description="correlation", ordering="correlation_id")
    def correlation(self, job):
        return _clipped(job.correlation_id, 24)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, job):
        if not job.next_attempt_at:
            return "—"
        return format_html(
            '<span title="{}">in {}</span>',
            f"{timezone.localtime(job.next_attempt_at):%Y-%m-%d %H:%M:%S}",
            ago((job.next_attempt_at - self._now).total_seconds()),
        )

    @admin.display(description="error", ordering="error_class")
    def error(self, job):
        return _clipped(job.error_class.rsplit(".", 1)[-1], 28, title=job.error_class)

    class Media:
        css = {"all": ["dashboard/console.css"]}


def _job_act(name: str, job_id, *, actor: str, reason: str, user, form) -> str:
    if name == "retry_now":
        return f"retried: {services.job_retry_now(job_id=job_id, actor=actor, reason=reason, user=user).state}"
    if name == "cancel":
        return f"cancelled: {services.job_cancel(job_id=job_id, actor=actor, reason=reason, user=user).state}"
    if name == "confirm":
        return f"confirmed: {services.job_confirm(job_id=job_id, actor=actor, reason=reason or 'confirmed', user=user).state}"
    if name == "release":
        services.job_release(job_id=job_id, actor=actor, reason=reason, user=user)
        return "released: planned again, due now"
    if name == "hold":
        services.job_hold(job_id=job_id, actor=actor, reason=reason, user=user)
        return "held: no worker claims it until it is resumed"
    if name == "resume":
        job = services.job_resume(job_id=job_id, actor=actor, reason=reason, user=user)
        return f"resumed: back in line, due {timezone.localtime(job.due_at):%Y-%m-%d %H:%M:%S}"
    if name == "reorder":
        priority, due_at = _reorder_input(form)
        job = services.job_reorder(
            job_id=job_id, actor=actor, reason=reason, priority=priority, due_at=due_at, user=user
        )
        return f"moved: lane {job.priority}, due {timezone.localtime(job.due_at):%Y-%m-%d %H:%M:%S}"
    services.job_send_to_review(job_id=job_id, actor=actor, reason=reason, user=user)
    return "sent to review"


def _reorder_input(form) -> tuple[int | None, datetime | None]:
    """The move's lane and due time from the console's form (a local date and time, the console's
    time zone); empty fields leave either as it is."""
    priority, due = form.get("priority", "").strip(), form.get("due_at", "").strip()
    if priority and not (priority.isascii() and priority.isdigit()):
        raise JobInputError("priority", "must be a whole number from 0 (most urgent) to 9 (the bulk lane)")
    try:
        due_at = timezone.make_aware(datetime.fromisoformat(due)) if due else None
    except (ValueError, OverflowError):
        raise JobInputError("due_at", f"{due[:40]!r} is not a date and time") from None
    return (int(priority) if priority else None), due_at


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


@admin.register(LeaderLease)
class LeaderLeaseAdmin(ReadOnlyAdmin):
    list_display = ("name", "holder", "term", "elected_at", "renewed_at", "expires_at")


@admin.register(DeposedWrite)
class DeposedWriteAdmin(ReadOnlyAdmin):
    list_display = ("at", "name", "operation", "holder", "term", "current_holder", "current_term")


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ("applied_at", "key", "kind", "job", "lease_version")
    search_fields = ("=key",)


@admin.register(StepEvent)
class StepEventAdmin(ReadOnlyAdmin):
    list_display = ("job", "lease_version", "step", "outcome", "started_at", "duration_ms")
    list_filter = ("outcome", "step")


def _clipped(text: str, width: int, *, title: str | None = None) -> str:
    """``text`` cut to ``width`` characters with an ellipsis; the whole of it (or ``title``) on hover."""
    if not text:
        return "—"
    shown = text if len(text) <= width else text[: width - 1] + "…"
    return format_html('<span title="{}">{}</span>', title or text, shown)


def _as_uuid(term: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(term)
    except ValueError:
        return None
