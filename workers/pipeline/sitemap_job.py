"""The ``sitemap`` job (pool ``crawl``, keyed by host like its pages): one sitemap file of a source read
(``workers.pipeline.sitemaps``), and a crawl job for each page it lists in scope (unless unchanged
since its last fetch), a candidate with its analysis for each image it lists, and a sitemap job for
each sitemap an index lists.

Payload: ``{"source_id": int, "url": str, "run": str, "chain": [str]}``; ``chain``: the sitemaps that
led to this one, none of which is read again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from jobs.errors import PermanentError
from workers.pipeline.crawl import candidates_record, page_key, source_of, spawn_reported
from workers.pipeline.fetching import fetch_politely
from workers.pipeline.http import MAX_URL_BYTES, url_problem, url_without_params
from workers.pipeline.models import url_in_scope
from workers.pipeline.sitemaps import (
    MAX_NESTING,
    SITEMAP_TYPES,
    SPAWN_CHUNK,
    listed_images,
    sitemap_children,
    sitemap_read,
    unchanged_pages,
)
from workers.runtime.context import Child, Done, JobContext, Skipped


@dataclass(frozen=True)
class SitemapSpec:
    source_id: int
    url: str
    run: str
    chain: tuple[str, ...]  # the sitemaps that led here (an index's, and its index's): none is read again


def subject(payload: dict) -> str:
    """A sitemap job is about the file it reads."""
    return str(payload.get("url") or "")


def parse(payload: dict) -> SitemapSpec:
    unknown = set(payload) - {"source_id", "url", "run", "chain"}
    if unknown:
        raise PermanentError(f"unknown sitemap payload fields: {', '.join(sorted(unknown))}")
    source_id, url, run, chain = (payload.get(k) for k in ("source_id", "url", "run", "chain"))
    chain = [] if chain is None else chain
    if isinstance(source_id, bool) or not isinstance(source_id, int) or source_id < 1:
        raise PermanentError("payload.source_id must be a positive integer")
    if not isinstance(url, str) or url_problem(url):
        raise PermanentError(
            f"payload.url must be an http(s) URL of at most {MAX_URL_BYTES} bytes without control characters"
        )
    if not isinstance(run, str) or not 0 < len(run) <= 100:
        raise PermanentError("payload.run must be a string of 1-100 characters")
    if (
        not isinstance(chain, list)
        or len(chain) > MAX_NESTING
        or not all(isinstance(u, str) and not url_problem(u) for u in chain)
    ):
        raise PermanentError(f"payload.chain must be a list of at most {MAX_NESTING} http(s) URLs")
    return SitemapSpec(source_id, url, run, tuple(chain))


def handle(context: JobContext):
    spec = parse(context.payload)
    source = source_of(context, spec.source_id)
    if not source.is_active:
        return Skipped(f"source {source.name} is inactive")
    fetched = fetch_politely(context, spec.url, accept=SITEMAP_TYPES, other_types=True)
    if fetched.other_type is not None:
        return Done(reason=f"not a sitemap: {spec.url} is {fetched.other_type.content_type}, left alone")
    if fetched.result is None:
        return Skipped(fetched.robots.reason)
    with context.step("read") as info:
        found = sitemap_read(fetched.result.body)  # SitemapRefused: the job's error, with its reason
        scope = source.effective_scope
        pages = list(
            {
                url_without_params(url, source.ignored_params): lastmod
                for url, lastmod in found.pages
                if url_in_scope(url, scope)
            }.items()
        )
        unchanged = unchanged_pages(pages)
        follow = [url for url, _ in pages if url not in unchanged]
        images = listed_images(found, source.ignored_params)
        info.update(kind=found.kind, pages_listed=len(found.pages), pages_in_scope=len(pages))
        info.update(pages_unchanged=len(unchanged), images_listed=len(images))
        if found.cut or found.invalid:
            info.update(entries_cut=found.cut, entries_invalid=found.invalid)
        # An index's sitemaps: in scope, none already on the way here (an index listing itself, or a
        # loop through another index), none nested deeper than the protocol allows.
        chain = (*spec.chain, spec.url)
        nested, refused = [], []
        for url in dict.fromkeys(found.sitemaps):
            if url in chain:
                refused.append({"url": url[:300], "reason": "lists itself (or a sitemap that led to it)"})
            elif len(chain) > MAX_NESTING:
                refused.append({"url": url[:300], "reason": f"nested deeper than {MAX_NESTING} sitemaps"})
            elif not url_in_scope(url, scope):
                refused.append({"url": url[:300], "reason": "outside the source's scope"})
            else:
                nested.append(url)
        if found.kind == "sitemapindex":
            info.update(sitemaps_listed=len(found.sitemaps), sitemaps_followed=len(nested))
        if refused:
            info.update(sitemaps_refused=len(refused), refusals=refused[:10])
    if images:
        with context.step("candidates") as info:
            candidates = context.effect(
                f"candidates:{context.job_id}",
                lambda: [[c.id, c.image_url] for c in candidates_record(source, spec.url, images)],
                kind="candidates",
            )
            info.update(candidates=len(candidates))
    else:
        candidates = []
    children = [
        Child("analysis", {"candidate_id": c}, f"{spec.run}:{c}", source.priority, source.name, subject=url)
        for c, url in candidates
    ]
    # A page from a sitemap is crawled as one the first page links to (depth 1): its links are followed
    # as far as the source's depth allows, as they would be had the link crawl reached it first.
    children += [
        Child(
            "crawl",
            {"source_id": source.id, "url": url, "depth": 1, "run": spec.run},
            page_key(spec.run, url),
            source.priority,
            source.name,
            subject=url,
        )
        for url in follow
    ]
    children += sitemap_children(spec.run, source, nested, chain)
    with context.step("spawn") as info:
        for start in range(0, len(children), SPAWN_CHUNK):
            spawn_reported(context, children[start : start + SPAWN_CHUNK], info)
    return Done(
        reason=(
            f"sitemap read ({found.kind}): {len(follow)} pages to crawl ({len(unchanged)} unchanged since their "
            f"last fetch), {len(candidates)} images, {len(nested)} sitemaps"
        ),
        result_ref=f"sitemap:{spec.url}"[:500],
        result_checksum=hashlib.sha256(fetched.result.body).hexdigest(),
    )
