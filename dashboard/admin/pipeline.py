"""Admin pages for the pipeline's records: sources, protected assets, candidates and findings.

Sources and assets are created through ``workers.services`` (validated, with the field at fault
named); candidates and findings are written only by the handlers and are read-only here.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from dashboard.admin.base import AuditedAdmin, OfferedLookupsOnly, ReadOnlyAdmin, ReadOnlyInline
from dashboard.audit import audited
from dashboard.display import data_uri
from jobs.models import OPERATE_PERMISSION
from jobs.selectors import short_id as id_short
from jobs.services import JobInputError
from workers.pipeline.models import Candidate, Finding, ProtectedAsset, Source
from workers.pipeline.schedules import every_minutes, schedule_state, schedule_validate, with_schedule, zone_of
from workers.pipeline.services import asset_register, crawl_start, query_params_check, sitemaps_read, source_validate


def _field_error(form: forms.Form, error: JobInputError) -> None:
    form.add_error(error.field if error.field in form.fields else None, error.message)


class SourceForm(forms.ModelForm):
    base_url = forms.URLField(max_length=500, assume_scheme="https", help_text="The page a crawl run starts from.")

    class Meta:
        model = Source
        fields = (
            "name",
            "base_url",
            "scope",
            "priority",
            "max_depth",
            "max_links_per_page",
            "max_images_per_page",
            "sitemaps",
            "query_params_ignored",
            "is_active",
            "crawl_every_minutes",
            "window_start",
            "window_end",
            "time_zone",
        )

    def clean(self):
        data = super().clean()
        if not self.errors:
            try:
                source_validate(
                    name=data["name"], base_url=data["base_url"], scope=data.get("scope", ""), priority=data["priority"]
                )
                query_params_check(data.get("query_params_ignored", ""))
                schedule_validate(
                    crawl_every_minutes=data.get("crawl_every_minutes"),
                    window_start=data.get("window_start"),
                    window_end=data.get("window_end"),
                    time_zone=data.get("time_zone", ""),
                )
            except JobInputError as exc:
                _field_error(self, exc)
        return data


@admin.action(description="Start a crawl run for the selected sources", permissions=["operate"])
def start_crawl(modeladmin, request, queryset):
    sources = list(queryset.order_by("name"))
    submissions = []

    def apply():
        submissions.extend(crawl_start(actor=f"user:{request.user.get_username()}", sources=sources, user=request.user))
        return f"{len(submissions)} crawl job(s)"

    try:
        audited(
            request,
            action="source.crawl",
            target="sources " + ", ".join(s.name for s in sources),
            reason="started from the console",
            permission=OPERATE_PERMISSION,
            apply=apply,
        )
    except JobInputError as exc:
        modeladmin.message_user(request, f"No crawl started: {exc.message}", messages.ERROR)
        return
    run = submissions[0].job.payload["run"] if submissions else ""
    modeladmin.message_user(request, f"Crawl run {run} started for {len(submissions)} source(s).", messages.SUCCESS)


@admin.register(Source)
class SourceAdmin(AuditedAdmin):
    form = SourceForm
    show_full_result_count = False
    list_display = (
        "name",
        "base_url",
        "priority",
        "is_active",
        "schedule",
        "last_run_link",
        "next_run",
        "waits_for",
        "candidates",
        "matches",
    )
    list_filter = ("is_active",)
    search_fields = ("name", "base_url")
    actions = [start_crawl]
    readonly_fields = ("last_run_link", "last_run_sitemaps", "last_crawled_at", "next_run", "waits_for")

    def get_queryset(self, request):
        # Counted in subqueries, not joins: a GROUP BY would also group by the schedule's database
        # time (a volatile function, different on every joined row) and repeat each source.
        candidates = Candidate.objects.filter(source=OuterRef("pk")).order_by().values("source")
        matches = (
            Finding.objects.filter(candidate__source=OuterRef("pk"), verdict=Finding.Verdict.MATCH)
            .order_by()
            .values("candidate__source")
        )
        return with_schedule(super().get_queryset(request)).annotate(
            candidate_count=Coalesce(Subquery(candidates.annotate(n=Count("id")).values("n")), 0),
            match_count=Coalesce(Subquery(matches.annotate(n=Count("candidate", distinct=True)).values("n")), 0),
        )

    @admin.display(description="candidates", ordering="candidate_count")
    def candidates(self, source):
        return source.candidate_count

    @admin.display(description="matches", ordering="match_count")
    def matches(self, source):
        return source.match_count

    @admin.display(description="schedule")
    def schedule(self, source):
        every = every_minutes(source)
        text = f"every {_interval(every)}" + ("" if source.crawl_every_minutes else " (default)")
        if source.window_start is not None:
            text += f", {source.window_start:%H:%M}–{source.window_end:%H:%M}"
        return f"{text} {zone_of(source).key}"

    @admin.display(description="last run")
    def last_run_link(self, source):
        run = source.last_run
        if run is None:
            return "—"
        state = "running" if run.finished_at is None else f"finished {run.finished_at:%H:%M}"
        url = reverse("admin:jobs_batch_change", args=[run.pk])
        return format_html(
            '<a href="{}">{}</a> (started {}, {})', url, run.name, f"{run.created_at:%Y-%m-%d %H:%M}", state
        )

    @admin.display(description="sitemaps in the last run")
    def last_run_sitemaps(self, source):
        """How many pages the source's sitemaps listed in its last run, and how many of them it reached."""
        if source.pk is None or source.last_run_id is None:
            return "—"
        read = sitemaps_read(source, source.last_run_id)
        if not read.sitemaps:
            return "none read" if source.sitemaps != Source.Sitemaps.OFF else "off: links only"
        return (
            f"{read.sitemaps} sitemap(s) listed {read.pages_listed} pages ({read.pages_in_scope} in scope, "
            f"{read.pages_unchanged} unchanged since their last fetch) and {read.images_listed} images; "
            f"the crawl reached {read.pages_reached} of the {read.pages_in_scope - read.pages_unchanged} pages it was given"
            + (f"; {read.refused} sitemap(s) refused" if read.refused else "")
        )

    @admin.display(description="next run")
    def next_run(self, source):
        state = _state(source)
        if state is None or state.next_at is None:
            return "—"
        return "now" if state.due else f"{state.next_at.astimezone(zone_of(source)):%Y-%m-%d %H:%M}"

    @admin.display(description="waits for")
    def waits_for(self, source):
        state = _state(source)
        if source.start_error:  # its last run could not start it: what an operator must mend
            next_try = f"; tried again at {state.next_at:%Y-%m-%d %H:%M}" if state and state.next_at else ""
            return f"not started: {source.start_error}{next_try}"
        return "" if state is None else state.waiting

    def has_operate_permission(self, request):
        return request.user.has_perm("jobs.operate_job")

    def has_delete_permission(self, request, obj=None):
        return False  # candidates refer to it: deactivate instead


def _state(source: Source):
    """The schedule of a source the admin loaded (``with_schedule``); None on an unsaved one."""
    return schedule_state(source) if hasattr(source, "db_now") else None


def _interval(minutes: int) -> str:
    for unit, size in (("week", 10080), ("day", 1440), ("h", 60)):
        if minutes % size == 0:
            count = minutes // size
            return f"{count} {unit}" if unit == "h" else f"{count} {unit}{'s' if count > 1 else ''}"
    return f"{minutes} min"


class AssetForm(forms.ModelForm):
    upload = forms.FileField(label="Image", help_text="JPEG, PNG, GIF or WEBP; at most 20 MiB.")

    class Meta:
        model = ProtectedAsset
        fields = ("name", "owner_ref")

    def clean(self):
        # The asset is registered here, while validating, so that the decoder's verdict on the image
        # becomes a form error; the admin's add view runs in a transaction, and nothing else can fail after.
        data = super().clean()
        if self.errors:
            return data
        try:
            self.instance, created = asset_register(
                name=data["name"], owner_ref=data["owner_ref"], data=data["upload"].read()
            )
        except JobInputError as exc:
            _field_error(self, exc) if exc.field != "image" else self.add_error("upload", exc.message)
            return data
        if not created:
            self.add_error("upload", f"this image is already registered as {self.instance}")
        return data


def _thumbnail(data: bytes, width: int = 96):
    return format_html('<img src="{}" width="{}" alt="">', data_uri(data), width)


@admin.register(ProtectedAsset)
class ProtectedAssetAdmin(OfferedLookupsOnly, admin.ModelAdmin):
    form = AssetForm
    show_full_result_count = False
    list_display = ("preview", "name", "owner_ref", "fingerprinted", "size", "created_at")
    search_fields = ("name", "owner_ref")
    readonly_fields = ("preview", "fingerprint_summary", "dhash", "content_hash", "width", "height", "created_at")

    def get_fields(self, request, obj=None):
        return ("name", "owner_ref", "upload") if obj is None else self.readonly_fields + ("name", "owner_ref")

    def get_form(self, request, obj=None, **kwargs):
        if obj is not None:
            kwargs["form"] = forms.ModelForm
        return super().get_form(request, obj, **kwargs)

    def save_model(self, request, obj, form, change):
        pass  # asset_register stored it while the form was validated

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="image")
    def preview(self, asset):
        return _thumbnail(asset.image)

    @admin.display(description="size")
    def size(self, asset):
        return f"{asset.width}×{asset.height}"

    @admin.display(description="fingerprint")
    def fingerprinted(self, asset):
        return asset.fingerprint_version or "— (manage.py fingerprint_assets)"

    @admin.display(description="fingerprint (analysis@2)")
    def fingerprint_summary(self, asset):
        """What the comparison stores of the original: its PDQ hashes and keypoints."""
        if asset.fingerprint_error:
            return f"none: {asset.fingerprint_error} — not compared (manage.py fingerprint_assets --retry-failed)"
        if not asset.fingerprint_version:
            return "none yet: not compared until manage.py fingerprint_assets has run"
        meta = asset.fingerprint
        keypoints = len(bytes(asset.keypoints)) // 40
        trimmed = meta.get("trim") != [0, 0, *meta.get("whole", [])]
        hashes = " · ".join(asset.pdq_hashes)
        return format_html(
            "{} — PDQ quality {}; {} keypoints; {}<br><code>{}</code>",
            asset.fingerprint_version,
            meta.get("quality"),
            keypoints,
            "hashes of the whole image and of its content without frame or bar"
            if trimmed
            else "one hash (nothing trimmed)",
            hashes,
        )


class FindingInline(ReadOnlyInline):
    model = Finding
    fields = ("created_at", "asset", "score", "verdict", "analysis_version", "job")
    readonly_fields = fields


@admin.register(Candidate)
class CandidateAdmin(ReadOnlyAdmin):
    list_display = ("image_url", "source", "page_url", "found_in", "first_seen_at", "last_seen_at", "analysed_at")
    list_filter = ("source", "found_in")
    search_fields = ("=image_url", "page_url")
    ordering = ("-last_seen_at",)
    inlines = [FindingInline]


@admin.register(Finding)
class FindingAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "verdict", "score_display", "candidate_link", "asset", "source", "job_link")
    list_filter = ("verdict", "analysis_version", "candidate__source")
    search_fields = ("=candidate__image_url",)
    ordering = ("-created_at",)
    list_select_related = ("candidate__source", "asset")
    readonly_fields = ("same_bytes_at",)

    @admin.display(description="score", ordering="score")
    def score_display(self, finding):
        return f"{finding.score:.3f}"

    @admin.display(description="candidate")
    def candidate_link(self, finding):
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:workers_candidate_change", args=[finding.candidate_id]),
            finding.candidate.image_url,
        )

    @admin.display(description="source", ordering="candidate__source__name")
    def source(self, finding):
        return finding.candidate.source.name

    @admin.display(description="the same bytes also at")
    def same_bytes_at(self, finding):
        """The images whose bytes are this finding's under other URLs: not analysed again."""
        others = list(finding.same_bytes.order_by("id")[:20])
        if not others:
            return "—"
        return format_html_join(
            format_html("<br>"),
            '<a href="{}">{}</a> ({})',
            ((reverse("admin:workers_candidate_change", args=[c.pk]), c.image_url, c.found_in) for c in others),
        )

    @admin.display(description="analysis job")
    def job_link(self, finding):
        if finding.job_id is None:
            return "—"
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:jobs_job_change", args=[finding.job_id]), id_short(finding.job_id)
        )
