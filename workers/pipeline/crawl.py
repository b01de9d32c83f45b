"""The crawl handler (pool ``crawl``): one job fetches one page of a source.

robots.txt → the page (politely, through the safe client) → image URLs and in-scope links →
candidates upserted (one row per image URL) → an analysis job per image and a crawl job per link
(below the source's depth), each a child carrying this job's correlation ID → done.

Payload: ``{"source_id": int, "url": str, "depth": int, "run": str}``. ``run`` names the crawl run;
child jobs are idempotent per run and URL, so a retried page spawns nothing twice and a page linked
from three others is crawled once per run.
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

from jobs.errors import PermanentError
from jobs.models import LeitstandNow
from workers.pipeline.fetching import fetch_politely
from workers.pipeline.http import MAX_URL_BYTES, Validators, url_canonical, url_problem
from workers.pipeline.models import Candidate, PageState, Source, url_in_scope
from workers.runtime.context import Child, Done, JobContext, Skipped

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# What a step records of the URLs and children it had to leave out: enough to see why.
SHOWN_REFUSALS = 10


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
    # Read once per wake-up by its jobs (a wake-up lasts seconds: a source switched off is seen by the next).
    sources = context.shared.setdefault("sources", {})
    if spec.source_id not in sources:
        sources[spec.source_id] = Source.objects.filter(pk=spec.source_id).first()
    source = sources[spec.source_id]
    if source is None:
        raise PermanentError(f"source {spec.source_id} does not exist")
    if not source.is_active:
        return Skipped(f"source {source.name} is inactive")
    known = PageState.objects.filter(url=spec.url).first()
    fetched = fetch_politely(
        context, spec.url, accept=HTML_TYPES, validators=Validators(known.etag, known.last_modified) if known else None
    )
    if fetched.result is None:
        return Skipped(fetched.robots.reason)
    if fetched.unchanged:
        return _unchanged(context, spec, source, known)
    page = fetched.result
    with context.step("extract") as info:
        found = extract(page.body, base_url=page.final_url, charset=_charset(page.headers.get("content-type", "")))
        scope = source.effective_scope
        image_urls = found.images[: source.max_images_per_page]
        links = [link for link in found.links if url_in_scope(link, scope)][: source.max_links_per_page]
        info.update(images=len(image_urls), links_in_scope=len(links), links_found=len(found.links))
        if found.unusable_count:
            # Skipped and named, never the page's failure: the records cannot hold such a URL.
            info.update(urls_unusable=found.unusable_count, unusable=found.unusable)
    with context.step("candidates") as info:
        # Through the effect ledger: written only while this attempt holds the lease (a cancelled or
        # zombie attempt is refused and recorded), and once per job across its attempts.
        candidates = context.effect(
            f"candidates:{context.job_id}",
            lambda: page_record(
                source,
                spec,
                page.final_url,
                image_urls,
                state={
                    "etag": fetched.validators.etag,
                    "last_modified": fetched.validators.last_modified,
                    "content_hash": hashlib.sha256(page.body).hexdigest(),
                    "links": links,
                },
            ),
            kind="candidates",
        )
        info.update(candidates=len(candidates))
    follow = links if spec.depth < source.max_depth else []
    _spawn(context, spec, source, candidates, follow)
    return Done(
        reason=f"page crawled: {len(candidates)} images handed to analysis, {len(follow)} links followed",
        result_ref=f"page:{page.final_url}"[:500],
        result_checksum=hashlib.sha256(page.body).hexdigest(),
    )


def _spawn(context: JobContext, spec: CrawlSpec, source: Source, candidates: list, follow: list[str]) -> None:
    with context.step("spawn") as info:
        # Every child of the page in one statement and one commit: an analysis per image, a crawl per
        # link below the source's depth. A link reached by another path (at another depth) in this run
        # is a key that names a different request: reported, not created again.
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
            )
            for link in follow
        ]
        spawned = context.spawn_many(analyses + crawls)
        already = sum(s.conflict for s in spawned[len(analyses) :])
        refused = [
            {
                "type": child.job_type,
                "subject": child.payload.get("url") or child.payload.get("candidate_id"),
                "reason": s.refused[:300],
            }
            for child, s in zip(analyses + crawls, spawned)
            if s.refused
        ]
        info.update(
            analyses=len(analyses) - sum(bool(s.refused) for s in spawned[: len(analyses)]),
            crawls=len(crawls) - already - sum(bool(s.refused) for s in spawned[len(analyses) :]),
            already_in_run=already,
        )
        if refused:
            # One bad child never fails its page: it is named here, with why, and the rest go on.
            info.update(refused=len(refused), refusals=refused[:SHOWN_REFUSALS])


def _candidate_pair(recorded) -> tuple[int, str]:
    """A candidate as the page's effect recorded it: ``[id, image URL]`` (an effect recorded before
    the URL was kept is its ID alone; its analysis reads the URL itself)."""
    return (recorded, "") if isinstance(recorded, int) else (recorded[0], recorded[1])


def page_key(run: str, url: str) -> str:
    """A page's crawl job in a run: keyed by the digest of its URL, so any URL a page may link to
    makes a key of bounded length (a raw URL of 230 characters made one longer than keys may be)."""
    return f"{run}:url-{hashlib.sha256(url.encode()).hexdigest()[:40]}"


def _unchanged(context: JobContext, spec: CrawlSpec, source: Source, known: PageState) -> Done:
    """The page answered 304: nothing downloaded, nothing to analyse — its images are the ones already
    analysed. Its links of the last full fetch are followed, so pages below it are still asked."""
    if spec.depth == 0:
        context.effect(f"crawled:{context.job_id}", lambda: _crawled(source), kind="crawled")
    follow = (
        [link for link in known.links if url_in_scope(link, source.effective_scope)]
        if spec.depth < source.max_depth
        else []
    )
    _spawn(context, spec, source, [], follow[: source.max_links_per_page])
    return Done(
        reason=f"page unchanged since its last fetch (304): nothing to analyse, {len(follow)} links followed",
        result_ref=f"page:{spec.url}"[:500],
        result_checksum=known.content_hash,
    )


def _crawled(source: Source) -> None:
    Source.objects.filter(pk=source.pk).update(last_crawled_at=LeitstandNow())


def page_record(source: Source, spec: CrawlSpec, page_url: str, image_urls: list[str], *, state: dict) -> list:
    """The page's effect: its candidates (``[id, image URL]`` each) and its state (version and links,
    for the next conditional request, in one upsert); a run's first page also marks the source as
    crawled."""
    candidates = [[c.id, c.image_url] for c in candidates_record(source, page_url, image_urls)]
    PageState.objects.bulk_create(
        [PageState(url=spec.url, **state)],
        update_conflicts=True,
        unique_fields=["url"],
        update_fields=[*state, "fetched_at"],
    )
    if spec.depth == 0:
        _crawled(source)
    return candidates


def candidates_record(source: Source, page_url: str, image_urls: list[str]) -> list[Candidate]:
    """Upsert one candidate per image URL (first seen kept, last seen and page updated)."""
    if not image_urls:
        return []
    rows = [Candidate(image_url=url, page_url=page_url, source=source) for url in dict.fromkeys(image_urls)]
    return Candidate.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["image_url"], update_fields=["page_url", "source", "last_seen_at"]
    )


# --- HTML ----------------------------------------------------------------------------------------


@dataclass
class Extracted:
    images: list[str]
    links: list[str]
    # URLs left out (too long for the records, control characters), the first few with why.
    unusable: list[dict] = field(default_factory=list)
    unusable_count: int = 0


def _charset(content_type: str) -> str:
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip("\"'") or "utf-8"
    return "utf-8"


# The encodings a web page may declare (the WHATWG Encoding Standard's), as Python names them. Any
# other codec Python knows is no page's: 'idna' and 'undefined' raise whatever the error handler,
# 'punycode' decodes in super-linear time (480 KB took 9.5 s), 'utf-7' and 'unicode_escape' make
# lone surrogates. A page declaring one is read as UTF-8.
WEB_ENCODINGS = frozenset(
    codecs.lookup(label).name
    for label in (
        "utf-8", "ibm866", "iso-8859-2", "iso-8859-3", "iso-8859-4", "iso-8859-5", "iso-8859-6", "iso-8859-7",
        "iso-8859-8", "iso-8859-10", "iso-8859-13", "iso-8859-14", "iso-8859-15", "iso-8859-16", "koi8-r",
        "koi8-u", "mac-roman", "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256",
        "cp1257", "cp1258", "mac-cyrillic", "gbk", "gb18030", "big5", "euc-jp", "iso-2022-jp", "shift_jis",
        "euc-kr", "utf-16-be", "utf-16-le", "latin-1", "ascii",
    )
)  # fmt: skip


def page_codec(charset: str) -> str:
    """The codec a page's declared charset names, if it is a web encoding; else UTF-8."""
    try:
        name = codecs.lookup(charset).name
    except (LookupError, ValueError):  # ValueError: a name with a NUL
        return "utf-8"
    return name if name in WEB_ENCODINGS else "utf-8"


def extract(body: bytes, *, base_url: str, charset: str = "utf-8") -> Extracted:
    """Image URLs (``img src``/``srcset``, ``source srcset``) and links (``a href``) of a page,
    absolute, without fragments, http(s) only, NUL-free and de-duplicated in page order."""
    text = body.decode(page_codec(charset), errors="replace")
    parser = _PageParser(base_url)
    parser.feed(text.replace("\x00", ""))
    parser.close()
    return Extracted(
        images=list(dict.fromkeys(parser.images)),
        links=list(dict.fromkeys(parser.links)),
        unusable=parser.unusable,
        unusable_count=parser.unusable_count,
    )


_TAB_AND_NEWLINE = {ord("\t"): None, ord("\n"): None, ord("\r"): None}
_C0_AND_SPACE = "".join(map(chr, range(0x21)))


class _PageParser(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.images: list[str] = []
        self.links: list[str] = []
        self.unusable: list[dict] = []
        self.unusable_count = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "base" and values.get("href"):
            self.base_url = self._absolute(values["href"]) or self.base_url
        elif tag == "img":
            self._add(self.images, values.get("src", ""))
            self._add_srcset(values.get("srcset", ""))
        elif tag == "source":
            self._add_srcset(values.get("srcset", ""))
        elif tag == "a":
            self._add(self.links, values.get("href", ""))

    def _add_srcset(self, srcset: str) -> None:
        for entry in srcset.split(","):
            self._add(self.images, entry.strip().split(" ")[0])

    def _add(self, into: list[str], raw: str) -> None:
        url = self._absolute(raw)
        if url:
            into.append(url)

    def _absolute(self, raw: str) -> str | None:
        # As browsers read an attribute's URL: tabs and line breaks inside are dropped, C0 controls
        # and spaces around it stripped (WHATWG URL standard).
        raw = raw.translate(_TAB_AND_NEWLINE).strip(_C0_AND_SPACE)
        if not raw:
            return None
        try:
            url = url_canonical(urldefrag(urljoin(self.base_url, raw)).url)
            scheme = urlsplit(url).scheme
        except ValueError:  # e.g. an invalid IPv6 literal
            return None
        if scheme not in ("http", "https"):
            return None
        problem = url_problem(url)
        if problem:
            self._unusable(url, problem)
            return None
        return url

    def _unusable(self, url: str, problem: str) -> None:
        self.unusable_count += 1
        if len(self.unusable) < SHOWN_REFUSALS:
            # As readable text that any record holds (a control character or a surrogate escaped).
            self.unusable.append({"url": ascii(url[:200])[1:-1], "reason": problem})
