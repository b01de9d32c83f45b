"""The crawl handler (pool ``crawl``): one job fetches one page of a source.

robots.txt → the page (politely, through the safe client) → image URLs and in-scope links →
candidates upserted (one row per image URL) → an analysis job per image and a crawl job per link
(below the source's depth), each a child carrying this job's correlation ID → done.

Payload: ``{"source_id": int, "url": str, "depth": int, "run": str}``. ``run`` names the crawl run;
child jobs are idempotent per run and URL, so a retried page spawns nothing twice and a page linked
from three others is crawled once per run.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field, replace

from jobs.errors import Deferred, PermanentError, TransientError
from jobs.models import LeitstandNow
from jobs.services import url_host_key
from workers.pipeline.extraction import (
    MAX_VARIANTS,
    SHOWN_REFUSALS,
    Extracted,
    FoundImage,
    content_charset,
    extract,
    page_codec,
    stylesheet_images,
)
from workers.pipeline.fetching import ROBOTS_PATIENCE_SECONDS, Fetched, fetch_politely
from workers.pipeline.http import (
    IMAGE_TYPES,
    MAX_URL_BYTES,
    UnexpectedType,
    Validators,
    url_normal,
    url_problem,
    url_without_params,
)
from workers.pipeline.models import Candidate, PageState, Source, Stylesheet, url_in_scope
from workers.pipeline.sitemaps import sitemap_children, sitemaps_of
from workers.runtime.context import Child, Done, JobContext, Skipped

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


@dataclass(frozen=True)
class CrawlSpec:
    source_id: int
    url: str
    depth: int
    run: str


def subject(payload: dict) -> str:
    """A crawl job is about the page it fetches."""
    return str(payload.get("url") or "")


def parse(payload: dict) -> CrawlSpec:
    unknown = set(payload) - {"source_id", "url", "depth", "run"}
    if unknown:
        raise PermanentError(f"unknown crawl payload fields: {', '.join(sorted(unknown))}")
    source_id, url, depth, run = (payload.get(k) for k in ("source_id", "url", "depth", "run"))
    if isinstance(source_id, bool) or not isinstance(source_id, int) or source_id < 1:
        raise PermanentError("payload.source_id must be a positive integer")
    if not isinstance(url, str) or url_problem(url):
        raise PermanentError(
            f"payload.url must be an http(s) URL of at most {MAX_URL_BYTES} bytes without control characters"
        )
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= 100:
        raise PermanentError("payload.depth must be an integer from 0 to 100")
    if not isinstance(run, str) or not 0 < len(run) <= 100:
        raise PermanentError("payload.run must be a string of 1-100 characters")
    return CrawlSpec(source_id, url, depth, run)


def handle(context: JobContext):
    spec = parse(context.payload)
    source = source_of(context, spec.source_id)
    if not source.is_active:
        return Skipped(f"source {source.name} is inactive")
    known = PageState.objects.filter(url=spec.url).first()
    fetched = fetch_politely(
        context,
        spec.url,
        accept=HTML_TYPES,
        validators=Validators(known.etag, known.last_modified) if known else None,
        other_types=True,
    )
    if fetched.other_type is not None:
        return _not_a_page(context, spec, source, fetched.other_type)
    if fetched.result is None:
        return Skipped(fetched.robots.reason)
    if fetched.unchanged:
        return _unchanged(context, spec, source, known, fetched)
    page = fetched.result
    with context.step("extract") as info:
        found = extract(
            page.body, base_url=page.final_url, charset=content_charset(page.headers.get("content-type", ""))
        )
        scope = source.effective_scope
        if source.ignored_params:
            found = without_params(found, source.ignored_params)
        images = found.images[: source.max_images_per_page]
        links = [link for link in found.links if url_in_scope(link, scope)][: source.max_links_per_page]
        info.update(
            images=len(images),
            images_found=len(found.images),
            found_in=dict(Counter(image.found_in for image in images)),
            links_in_scope=len(links),
            links_found=len(found.links),
        )
        if found.ignored:
            info["ignored"] = found.ignored  # data:, javascript:, empty values: counted, never recorded
        if found.problems:
            info["problems"] = found.problems  # a broken block (invalid JSON-LD): named, the rest read
        if found.unusable_count:
            # Skipped and named, never the page's failure: the records cannot hold such a URL.
            info.update(urls_unusable=found.unusable_count, unusable=found.unusable)
    sheets = _stylesheets(context, spec, page.final_url, found.stylesheets) if found.stylesheets else Sheets()
    if sheets.images:
        images = list(found.images)
        seen = {image.url for image in images}
        for image in sheets.images:
            url = url_without_params(image.url, source.ignored_params)
            if url not in seen:
                seen.add(url)
                images.append(replace(image, url=url))
        images = images[: source.max_images_per_page]
    with context.step("candidates") as info:
        # Through the effect ledger: written only while this attempt holds the lease (a cancelled or
        # zombie attempt is refused and recorded), and once per job across its attempts.
        candidates = context.effect(
            f"candidates:{context.job_id}",
            lambda: page_record(
                source,
                spec,
                page.final_url,
                images,
                state={
                    "etag": fetched.validators.etag,
                    "last_modified": fetched.validators.last_modified,
                    "content_hash": hashlib.sha256(page.body).hexdigest(),
                    "links": links,
                },
                stylesheets=sheets.rows,
            ),
            kind="candidates",
        )
        info.update(candidates=len(candidates))
    follow = links if spec.depth < source.max_depth else []
    _spawn(context, spec, source, candidates, follow, _run_sitemaps(spec, source, fetched))
    return Done(
        reason=f"page crawled: {len(candidates)} images handed to analysis, {len(follow)} links followed",
        result_ref=f"page:{page.final_url}"[:500],
        result_checksum=hashlib.sha256(page.body).hexdigest(),
    )


STYLESHEET_TYPES = frozenset({"text/css"})
MAX_STYLESHEET_IMAGES = 100


@dataclass
class Sheets:
    images: list[FoundImage] = field(default_factory=list)  # the background images they give
    rows: list[Stylesheet] = field(default_factory=list)  # read now: recorded with the page, for the run


def _stylesheets(context: JobContext, spec: CrawlSpec, page_url: str, urls: list[str]) -> Sheets:
    """The page's own linked stylesheets (on its host), each read once per crawl run: politely (the
    host's next turn waited for in place, at most ROBOTS_PATIENCE_SECONDS), conditionally, bounded.
    One that cannot be read now is named on the step; the page goes on without it."""
    host = url_host_key(page_url)
    sheets, read = Sheets(), []
    with context.step("stylesheets") as info:
        own = [url for url in urls if url_host_key(url) == host]
        if len(own) < len(urls):
            info["other_hosts"] = len(urls) - len(own)
        known = {row.url: row for row in Stylesheet.objects.filter(url__in=own)}
        for url in own:
            row = known.get(url)
            if row is not None and row.run == spec.run:  # read by an earlier page of this run
                read.append({"url": url, "read": "earlier in this run", "images": len(row.images)})
                sheets.images += [FoundImage(image, "css stylesheet") for image in row.images]
                continue
            outcome, new = _stylesheet_read(context, spec, url, row)
            read.append({"url": url, **outcome})
            if new is not None:
                sheets.rows.append(new)
                sheets.images += [FoundImage(image, "css stylesheet") for image in new.images]
        info.update(stylesheets=read, images=len(sheets.images))
    return sheets


def _stylesheet_read(context: JobContext, spec: CrawlSpec, url: str, row: Stylesheet | None):
    """One stylesheet fetched and read: what the step says of it, and its row for the run (None when
    it could not be asked now: another page of the run asks again)."""
    try:
        fetched = fetch_politely(
            context,
            url,
            accept=STYLESHEET_TYPES,
            validators=Validators(row.etag, row.last_modified) if row is not None and not row.error else None,
            other_types=True,
            patience_seconds=ROBOTS_PATIENCE_SECONDS,
            steps=False,
        )
    except (Deferred, TransientError) as later:  # a busy host, a 503: not now, maybe for the next page
        return {"error": f"{type(later).__name__}: {later}"[:300]}, None
    except PermanentError as refused:  # a 404, a refused address: not for this run
        error = f"{type(refused).__name__}: {refused}"[:300]
        return {"error": error}, Stylesheet(url=url, run=spec.run, images=[], error=error)
    if fetched.other_type is not None:
        error = f"not CSS: {fetched.other_type.content_type or 'no content type'}"
        return {"error": error}, Stylesheet(url=url, run=spec.run, images=[], error=error)
    if fetched.result is None:
        error = f"not read: {fetched.robots.reason}"[:300]
        return {"error": error}, Stylesheet(url=url, run=spec.run, images=[], error=error)
    if fetched.unchanged and row is not None:
        images = row.images
    else:
        body = fetched.result.body.decode(
            page_codec(content_charset(fetched.result.headers.get("content-type", ""))), "replace"
        )
        images = stylesheet_images(body, url=fetched.result.final_url).image_urls[:MAX_STYLESHEET_IMAGES]
    validators = fetched.validators
    new = Stylesheet(url=url, run=spec.run, images=images, etag=validators.etag, last_modified=validators.last_modified)
    return {"status": fetched.result.status, "images": len(images)}, new


def _spawn(
    context: JobContext, spec: CrawlSpec, source: Source, candidates: list, follow: list[str], sitemaps: list[str]
) -> None:
    with context.step("spawn") as info:
        # Every child of the page in one statement and one commit: an analysis per image, a crawl per
        # link below the source's depth, and a run's first page the sitemaps its robots.txt names. A
        # link reached by another path (at another depth) in this run is a key that names a different
        # request: reported, not created again.
        analyses = [
            Child("analysis", {"candidate_id": c}, f"{spec.run}:{c}", source.priority, source.name, subject=url)
            for c, url in map(_candidate_pair, candidates)
        ]
        crawls = [
            Child(
                "crawl",
                {"source_id": source.id, "url": link, "depth": spec.depth + 1, "run": spec.run},
                page_key(spec.run, link),
                source.priority,
                source.name,
                subject=link,
            )
            for link in follow
        ]
        spawn_reported(context, analyses + crawls + sitemap_children(spec.run, source, sitemaps), info)


# How a step names the children of each type it created.
_SPAWNED_AS = {"analysis": "analyses", "crawl": "crawls", "sitemap": "sitemaps"}


def spawn_reported(context: JobContext, children: list[Child], info: dict) -> None:
    """Create ``children`` in one statement and count on the step what became of them (added to what
    it counted before): created per type, ``already_in_run`` (a key naming another request of the
    run), and each refused one named with why — one bad child never fails its parent."""
    spawned = context.spawn_many(children)
    for name in _SPAWNED_AS.values():
        info.setdefault(name, 0)
    info.setdefault("already_in_run", 0)
    refused = info.get("refusals", [])
    for child, outcome in zip(children, spawned):
        if outcome.refused:
            info["refused"] = info.get("refused", 0) + 1
            if len(refused) < SHOWN_REFUSALS:
                subject = child.payload.get("url") or child.payload.get("candidate_id")
                refused.append({"type": child.job_type, "subject": subject, "reason": outcome.refused[:300]})
        elif outcome.conflict:
            info["already_in_run"] += 1
        else:
            key = _SPAWNED_AS.get(child.job_type, child.job_type)
            info[key] = info.get(key, 0) + 1
    if refused:
        info["refusals"] = refused
    if not info["sitemaps"]:
        del info["sitemaps"]


def source_of(context: JobContext, source_id: int) -> Source:
    """The job's source, read once per wake-up by its jobs (a wake-up lasts seconds: a source switched
    off is seen by the next)."""
    sources = context.shared.setdefault("sources", {})
    if source_id not in sources:
        sources[source_id] = Source.objects.filter(pk=source_id).first()
    source = sources[source_id]
    if source is None:
        raise PermanentError(f"source {source_id} does not exist")
    return source


def _candidate_pair(recorded) -> tuple[int, str]:
    """A candidate as the page's effect recorded it: ``[id, image URL]`` (an effect recorded before
    the URL was kept is its ID alone; its analysis reads the URL itself)."""
    return (recorded, "") if isinstance(recorded, int) else (recorded[0], recorded[1])


def page_key(run: str, url: str) -> str:
    """A page's crawl job in a run: keyed by the digest of its URL, so any URL a page may link to
    makes a key of bounded length (a raw URL of 230 characters made one longer than keys may be)."""
    return f"{run}:url-{hashlib.sha256(url.encode()).hexdigest()[:40]}"


def _run_sitemaps(spec: CrawlSpec, source: Source, fetched: Fetched) -> list[str]:
    """A run's first page (depth 0) starts the source's sitemaps (``Source.sitemaps``)."""
    return sitemaps_of(source, fetched.robots.sitemaps, spec.url) if spec.depth == 0 else []


def _unchanged(context: JobContext, spec: CrawlSpec, source: Source, known: PageState, fetched: Fetched) -> Done:
    """The page answered 304: nothing downloaded, nothing to analyse — its images are the ones already
    analysed. Its links of the last full fetch are followed, so pages below it are still asked."""
    if spec.depth == 0:
        context.effect(f"crawled:{context.job_id}", lambda: _crawled(source), kind="crawled")
    follow = (
        [link for link in known.links if url_in_scope(link, source.effective_scope)]
        if spec.depth < source.max_depth
        else []
    )
    _spawn(context, spec, source, [], follow[: source.max_links_per_page], _run_sitemaps(spec, source, fetched))
    return Done(
        reason=f"page unchanged since its last fetch (304): nothing to analyse, {len(follow)} links followed",
        result_ref=f"page:{spec.url}"[:500],
        result_checksum=known.content_hash,
    )


def without_params(found: Extracted, ignored: tuple[str, ...]) -> Extracted:
    """The page's images and links without the query parameters its source drops: URLs that differ
    only by them (``?w=300``, ``?w=600``) become one image (the first), one link."""
    images: dict[str, FoundImage] = {}
    for image in found.images:
        url = url_without_params(image.url, ignored)
        first = images.setdefault(url, replace(image, url=url, variants=[]))
        for variant in (url_without_params(v, ignored) for v in image.variants):
            if variant != url and variant not in first.variants and len(first.variants) < MAX_VARIANTS:
                first.variants.append(variant)
    links = list(dict.fromkeys(url_without_params(link, ignored) for link in found.links))
    return replace(found, images=list(images.values()), links=links)


def _not_a_page(context: JobContext, spec: CrawlSpec, source: Source, other: UnexpectedType) -> Done:
    """A page link answered with something else: an image is a candidate like one the page showed,
    anything else is left alone. Done either way (the site did nothing wrong); the reason on its step."""
    if other.content_type not in IMAGE_TYPES or url_problem(other.url):
        return Done(
            reason=f"not a page: {other.url} is {other.content_type or 'without a content type'}, left alone",
            result_ref=f"page:{spec.url}"[:500],
        )
    with context.step("candidates") as info:
        image = FoundImage(url_normal(other.url), f"a href (answered {other.content_type})")
        candidates = context.effect(
            f"candidates:{context.job_id}",
            lambda: [[c.id, c.image_url] for c in candidates_record(source, spec.url, [image])],
            kind="candidates",
        )
        info.update(candidates=len(candidates), found_in=image.found_in)
    _spawn(context, spec, source, candidates, [], [])
    return Done(
        reason=f"not a page but an image ({other.content_type}): handed to analysis",
        result_ref=f"image:{other.url}"[:500],
    )


def _crawled(source: Source) -> None:
    Source.objects.filter(pk=source.pk).update(last_crawled_at=LeitstandNow())


def page_record(
    source: Source,
    spec: CrawlSpec,
    page_url: str,
    images: list[FoundImage],
    *,
    state: dict,
    stylesheets: list[Stylesheet] = (),
) -> list:
    """The page's effect: its candidates (``[id, image URL]`` each), its state (version and links,
    for the next conditional request, in one upsert) and the stylesheets it read for the run's other
    pages; a run's first page also marks the source as crawled."""
    candidates = [[c.id, c.image_url] for c in candidates_record(source, page_url, images)]
    PageState.objects.bulk_create(
        [PageState(url=spec.url, **state)],
        update_conflicts=True,
        unique_fields=["url"],
        update_fields=[*state, "fetched_at"],
    )
    if stylesheets:
        Stylesheet.objects.bulk_create(
            stylesheets,
            update_conflicts=True,
            unique_fields=["url"],
            update_fields=["run", "images", "etag", "last_modified", "error", "fetched_at"],
        )
    if spec.depth == 0:
        _crawled(source)
    return candidates


def candidates_record(source: Source, page_url: str, images: list[FoundImage]) -> list[Candidate]:
    """Upsert one candidate per image URL (first seen kept; last seen, page, where it was found and
    its other sizes updated)."""
    if not images:
        return []
    first: dict[str, FoundImage] = {}
    for image in images:
        first.setdefault(image.url, image)  # one row per URL in the statement: the first of the same URL
    rows = [
        Candidate(
            image_url=i.url,
            page_url=i.page_url or page_url,
            source=source,
            found_in=i.found_in[:100],
            variants=i.variants,
        )
        for i in first.values()
    ]
    return Candidate.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["image_url"],
        update_fields=["page_url", "source", "last_seen_at", "found_in", "variants"],
    )
