"""Services of the pipeline: registering protected assets and sources, starting crawl runs, and
keeping a reviewer's verdict with a finding."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, time
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import CharField, Exists, OuterRef, Value
from django.db.models.functions import Cast, Coalesce, Concat, Greatest
from django.utils import timezone

from jobs.batches import batch_create
from jobs.models import OPERATE_PERMISSION, Batch, Job, State, StepEvent, database_now
from jobs.services import IdempotencyConflict, JobInputError, Submission, text_check
from workers.pipeline import images, matching
from workers.pipeline.analysis import running_version
from workers.pipeline.asset_index import fingerprint_fields, keys_store
from workers.pipeline.crawl import page_key
from workers.pipeline.http import MAX_URL_BYTES, url_problem
from workers.pipeline.models import (
    AssetHashBand,
    AssetKeypointKey,
    Candidate,
    Finding,
    ProtectedAsset,
    Source,
    url_in_scope,
)
from workers.pipeline.schedules import current_slot, schedule_validate
from workers.runtime.services import job_submit, jobs_submit_many

MAX_ASSET_BYTES = 20 * 2**20
logger = logging.getLogger(__name__)


def asset_register(*, name: str, owner_ref: str, data: bytes) -> tuple[ProtectedAsset, bool]:
    """Register a protected original (idempotent per image content); returns (asset, created)."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or "\x00" in name:
        raise JobInputError("name", "must be 1-200 characters without NUL")
    if not isinstance(owner_ref, str) or not owner_ref.strip() or len(owner_ref) > 200 or "\x00" in owner_ref:
        raise JobInputError("owner_ref", "must be 1-200 characters without NUL")
    if not data:
        raise JobInputError("image", "is empty")
    if len(data) > MAX_ASSET_BYTES:
        raise JobInputError("image", f"is {len(data)} bytes; the limit is {MAX_ASSET_BYTES}")
    try:
        decoded = images.decode(data)
    except images.ImageRefused as exc:
        raise JobInputError("image", str(exc)) from None
    content_hash = hashlib.sha256(data).hexdigest()
    existing = ProtectedAsset.objects.filter(content_hash=content_hash).first()
    if existing is not None:
        return existing, False
    print_ = matching.fingerprint(decoded.pixels)
    with transaction.atomic():
        asset, created = ProtectedAsset.objects.get_or_create(
            content_hash=content_hash,
            defaults={
                "name": name.strip(),
                "owner_ref": owner_ref.strip(),
                "image": data,
                "dhash": f"{decoded.dhash:016x}",
                "width": decoded.width,
                "height": decoded.height,
                **fingerprint_fields(print_),
            },
        )
        if created:
            keys_store(asset.pk, print_)
    return asset, created


def assets_fingerprint(
    *, assets=ProtectedAsset, bands=AssetHashBand, keys=AssetKeypointKey, retry_failed: bool = False
) -> tuple[int, list[tuple[int, str]]]:
    """Fingerprint the originals whose fingerprint is missing or of another version
    (``matching.FINGERPRINT_VERSION``), one at a time, each in a transaction of its own (an image may
    be 20 MiB). One that cannot be decoded is marked with the reason (``fingerprint_error``: not
    compared, shown on its page) and the others go on; ``retry_failed`` tries the marked ones again.
    Returns (fingerprinted, [(id, reason) of those that failed]). (``assets``, ``bands``, ``keys``:
    the models, or a migration's historical ones.)"""
    stale = assets.objects.exclude(fingerprint_version=matching.FINGERPRINT_VERSION)
    if not retry_failed:
        stale = stale.filter(fingerprint_error="")
    done, failed = 0, []
    for asset_id in list(stale.order_by("id").values_list("id", flat=True)):
        image = assets.objects.filter(pk=asset_id).values_list("image", flat=True).first()
        if image is None:  # deleted meanwhile
            continue
        try:
            print_ = matching.fingerprint(images.decode(bytes(image)).pixels)
        except images.ImageRefused as exc:
            reason = f"not decoded: {exc}"[:300]
            assets.objects.filter(pk=asset_id).update(fingerprint_error=reason)
            logger.warning("protected asset %s was not fingerprinted: %s", asset_id, reason)
            failed.append((asset_id, reason))
            continue
        with transaction.atomic():
            assets.objects.filter(pk=asset_id).update(fingerprint_error="", **fingerprint_fields(print_))
            keys_store(asset_id, print_, bands=bands, keys=keys)
        done += 1
    return done, failed


def source_validate(*, name: str, base_url: str, scope: str = "", priority: int = 5) -> None:
    """The checks a source must pass, with the field at fault named: its name travels into every job
    it causes and every log line about them (printable, no line breaks or tabs), its base URL into a
    crawl job's payload (a URL the crawl can fetch and record)."""
    text_check("name", name, limit=200)
    if not name.strip():
        raise JobInputError("name", "must not be empty")
    if not isinstance(base_url, str) or url_problem(base_url):
        raise JobInputError(
            "base_url", f"must be an http or https URL of at most {MAX_URL_BYTES} bytes without control characters"
        )
    parts = urlsplit(base_url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise JobInputError("base_url", "must be an absolute http or https URL")
    if parts.username or parts.password:
        raise JobInputError("base_url", "must not contain user information")
    if scope and not url_in_scope(base_url, scope):
        raise JobInputError("scope", "must be a prefix of the base URL, or empty for the base URL's origin")
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise JobInputError("priority", "must be an integer from 0 (most urgent) to 9 (bulk)")


def query_params_check(params: str) -> None:
    """A source's dropped query parameters: names separated by commas, each with at most a trailing ``*``."""
    text_check("query_params_ignored", params, limit=500)
    names = [name.strip() for name in params.split(",")] if params.strip() else []
    if any(not name or any(c in name for c in " =&?#") or "*" in name[:-1] for name in names):
        raise JobInputError(
            "query_params_ignored", "must be parameter names separated by commas, each with at most a trailing *"
        )


def source_upsert(*, name: str, base_url: str, **crawl_settings) -> Source:
    """Create or update a source by name (its schedule's fields among the settings)."""
    source_validate(
        name=name, base_url=base_url, scope=crawl_settings.get("scope", ""), priority=crawl_settings.get("priority", 5)
    )
    schedule_validate(
        crawl_every_minutes=crawl_settings.get("crawl_every_minutes"),
        window_start=crawl_settings.get("window_start"),
        window_end=crawl_settings.get("window_end"),
        time_zone=crawl_settings.get("time_zone", ""),
    )
    query_params_check(crawl_settings.get("query_params_ignored", ""))
    if crawl_settings.get("sitemaps", Source.Sitemaps.ROBOTS) not in Source.Sitemaps.values:
        raise JobInputError("sitemaps", f"must be one of {', '.join(Source.Sitemaps.values)}")
    source, _ = Source.objects.update_or_create(name=name, defaults={"base_url": base_url, **crawl_settings})
    return source


def source_schedule_set(
    *,
    source_id: int,
    crawl_every_minutes: int | None,
    window_start: time | None = None,
    window_end: time | None = None,
    time_zone: str = "",
    actor: str,
    user=None,
) -> Source:
    """Set a source's crawl schedule (empty interval: the default; no window: any time). ``user``: the
    person acting (their operator permission is checked); None for trusted callers (an API token's scope)."""
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to change crawl schedules")
    schedule_validate(
        crawl_every_minutes=crawl_every_minutes, window_start=window_start, window_end=window_end, time_zone=time_zone
    )
    changed = Source.objects.filter(pk=source_id).update(
        crawl_every_minutes=crawl_every_minutes, window_start=window_start, window_end=window_end, time_zone=time_zone
    )
    if not changed:
        raise JobInputError("source_id", f"source {source_id} does not exist")
    logger.info(
        "schedule of source %s set by %s: every %s min, window %s-%s %s",
        source_id,
        actor,
        crawl_every_minutes,
        window_start,
        window_end,
        time_zone,
    )
    return Source.objects.get(pk=source_id)


def crawl_start(
    *,
    actor: str,
    sources: list[Source] | None = None,
    run: str | None = None,
    user=None,
    slot_at: datetime | None = None,
) -> list[Submission]:
    """Start a crawl run: one crawl job per active source, at its base URL (idempotent per run).
    ``user``: the person acting (their operator permission is checked); None for trusted callers.
    The run becomes each source's last run; ``slot_at``: the schedule's slot it was started for.

    A source that cannot be crawled (a name or base URL stored before today's checks refused such
    values) is left out with its reason recorded on it (``start_error``, shown with its schedule in
    the console); the others start. The submissions are those of the sources that started."""
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to start crawl runs")
    run = run or timezone.now().strftime("run-%Y%m%d-%H%M%S")
    chosen = sources if sources is not None else list(Source.objects.filter(is_active=True).order_by("name"))
    inactive = [source.name for source in chosen if not source.is_active]
    if inactive:
        raise JobInputError("source", f"source {inactive[0]!r} is inactive")
    submissions = []
    batch = None
    with transaction.atomic():
        # The run takes the sources' current slot (a run by hand too: the schedule's next run is the
        # next slot, not another run right after this one). A refused source takes it as well: its
        # schedule tries again at its next slot, not every round.
        now = database_now()
        for source in chosen:
            slot = slot_at or current_slot(source, now)
            made_now = batch is None
            try:
                with transaction.atomic():
                    if made_now:
                        # The run is a batch (made with its first crawl job: a run that starts no
                        # source leaves none): its crawl jobs, and every job they spawn, count
                        # towards its progress.
                        batch, _ = batch_create(
                            key=f"crawl-run:{run}",
                            name=f"crawl run {run}",
                            created_by=actor,
                            correlation_id=f"crawl:{run}",
                        )
                    submissions.append(_source_start(source, run=run, actor=actor, batch=batch))
            except (JobInputError, IdempotencyConflict) as refused:
                if made_now:
                    batch = None  # rolled back with the savepoint
                logger.warning("crawl run %s: source %s not started: %s", run, source.pk, refused)
                Source.objects.filter(pk=source.pk).update(
                    start_error=f"run {run}: {refused}"[:500],
                    last_slot_at=Greatest(Coalesce("last_slot_at", slot), slot),
                )
                continue
            Source.objects.filter(pk=source.pk).update(
                last_run=batch, last_slot_at=Greatest(Coalesce("last_slot_at", slot), slot), start_error=""
            )
    return submissions


def _source_start(source: Source, *, run: str, actor: str, batch: Batch) -> Submission:
    source_validate(name=source.name, base_url=source.base_url, scope=source.scope, priority=source.priority)
    return job_submit(
        job_type="crawl",
        payload={"source_id": source.id, "url": source.base_url, "depth": 0, "run": run},
        idempotency_key=page_key(run, source.base_url),
        actor=actor,
        priority=source.priority,
        correlation_id=f"crawl:{run}:source-{source.id}",
        source=source.name,
        batch_id=batch.pk,
    )


def reanalysis_start(*, actor: str, limit: int = 10_000, dry_run: bool = False, user=None) -> tuple[int, Batch | None]:
    """Analyse again, with the running analysis version, the candidates that have findings but none
    of that version: after an upgrade (analysis@1 → analysis@2) an unchanged page spawns no analysis
    (conditional requests), so its images would keep the old version's verdicts. One batch per
    version (its progress on the console's Batches page); each candidate's job is idempotent per
    version, so a second call adds only what the first did not take (``limit`` a call).
    Returns (candidates taken, the batch); ``dry_run`` counts without submitting."""
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to start analyses")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise JobInputError("limit", "must be an integer from 1 to 100000")
    version = running_version()
    prefix = f"reanalysis:{version}:"
    taken = Job.objects.filter(
        type="analysis", key_namespace="", idempotency_key=Concat(Value(prefix), Cast(OuterRef("pk"), CharField()))
    )
    stale = (
        Candidate.objects.filter(findings__isnull=False)
        .exclude(findings__analysis_version=version)
        .exclude(Exists(taken))
        .distinct()
        .order_by("id")
    )
    chosen = list(stale.values_list("id", "source__priority")[:limit])
    if dry_run or not chosen:
        return len(chosen), None
    with transaction.atomic():
        batch, _ = batch_create(
            key=f"reanalysis:{version}",
            name=f"analysis again with {version}",
            created_by=actor,
            correlation_id=f"reanalysis:{version}",
        )
        jobs_submit_many(
            [
                {
                    "job_type": "analysis",
                    "payload": {"candidate_id": candidate_id},
                    "idempotency_key": f"{prefix}{candidate_id}",
                    "priority": max(priority, 7),  # behind new work: a backlog, not an emergency
                }
                for candidate_id, priority in chosen
            ],
            actor=actor,
            correlation_id=f"reanalysis:{version}",
            batch_id=batch.pk,
        )
    return len(chosen), batch


def finding_review_record(*, job_id, verdict: str, reviewer: str, reason: str):
    """A reviewer's verdict on the finding of a review case (kept with the automatic score)."""
    finding = Finding.objects.select_related("candidate").filter(job_id=job_id).order_by("-created_at").first()
    if finding is None:
        return None
    finding.verdict = verdict
    finding.evidence = {**finding.evidence, "review": {"verdict": verdict, "by": reviewer, "reason": reason}}
    finding.save(update_fields=["verdict", "evidence"])
    return finding


@dataclass(frozen=True)
class SitemapsRead:
    """What a source's sitemaps listed in one crawl run, and how much of it the crawl reached."""

    sitemaps: int  # sitemap jobs of the run
    pages_listed: int
    pages_in_scope: int
    pages_unchanged: int  # not crawled: their lastmod is not after their last fetch
    images_listed: int
    pages_reached: int  # crawl jobs the sitemaps spawned that ended done
    refused: int  # sitemaps that ended dead (a gzip bomb, not a sitemap)


def sitemaps_read(source: Source, batch_id: int) -> SitemapsRead:
    """The sums of the ``read`` steps of the run's sitemap jobs of ``source`` (each job's latest)."""
    sitemaps = Job.objects.filter(batch_id=batch_id, type="sitemap", payload__source_id=source.pk)
    latest = dict(StepEvent.objects.filter(job__in=sitemaps, step="read").order_by("id").values_list("job_id", "data"))
    total = Counter()
    for data in latest.values():
        total.update({k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)})
    return SitemapsRead(
        sitemaps=sitemaps.count(),
        pages_listed=total["pages_listed"],
        pages_in_scope=total["pages_in_scope"],
        pages_unchanged=total["pages_unchanged"],
        images_listed=total["images_listed"],
        pages_reached=Job.objects.filter(
            batch_id=batch_id, type="crawl", parent__in=sitemaps, state=State.DONE
        ).count(),
        refused=sitemaps.filter(state=State.DEAD).count(),
    )
