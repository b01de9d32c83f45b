"""Sitemaps (the sitemaps.org protocol): the pages a site lists, and the images it lists with them.

A source is crawled from its sitemaps as well as its links (``Source.sitemaps``): its first page's job
spawns a ``sitemap`` job for each ``Sitemap:`` line of the host's robots.txt (or ``/sitemap.xml`` when
there is none and the source asks for it). A sitemap job fetches its file politely through the safe
client, reads it — XML (``urlset`` or ``sitemapindex``, the image extension), gzip-compressed or not,
or a text file of URLs — and spawns a crawl job for each listed page in the source's scope (unless its
``lastmod`` says it has not changed since the page was last fetched), a sitemap job for each sitemap an
index lists, and a candidate with its analysis for each listed image.

Sitemaps are hostile input like pages: bounded in bytes after decompression (``SitemapRefused``: a
gzip bomb), in entries and in nesting; read without a DTD (no entity expansion, no external
entities); an index listing itself (or one of the sitemaps that led to it) is refused entry by entry.
"""

from __future__ import annotations

import hashlib
import io
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urljoin

import defusedxml.ElementTree as SafeElementTree
from defusedxml import DefusedXmlException

from jobs.errors import PermanentError
from workers.pipeline.extraction import FoundImage
from workers.pipeline.http import MAX_URL_BYTES, url_normal, url_problem, url_without_params
from workers.pipeline.models import PageState, Source, url_in_scope
from workers.runtime.context import Child

MAX_SITEMAP_BYTES = 10 * 1024 * 1024  # after decompression (the protocol allows 50 MB; few sites come near)
MAX_ENTRIES = 50_000  # the protocol's own bound per file
MAX_NESTING = 2  # robots.txt → an index → its sitemaps (the protocol does not nest indexes)
SPAWN_CHUNK = 1_000  # children created per statement
SITEMAP_TYPES = frozenset(
    {
        "application/xml",
        "text/xml",
        "application/gzip",
        "application/x-gzip",
        "application/octet-stream",  # .xml.gz as many servers label it
        "text/plain",  # a text sitemap: one URL a line
        "",  # no type at all: the bytes decide
    }
)
_SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
_IMAGE_NS = "{http://www.google.com/schemas/sitemap-image/1.1}"


class SitemapRefused(PermanentError):
    """The sitemap is refused as a whole (a gzip bomb, not a sitemap): the reason is the job's error."""


@dataclass
class SitemapFile:
    kind: str  # "urlset", "sitemapindex" or "text"
    pages: list[tuple[str, datetime | None]] = field(default_factory=list)  # (loc, lastmod)
    images: list[tuple[str, str]] = field(default_factory=list)  # (image loc, the page that shows it)
    sitemaps: list[str] = field(default_factory=list)  # an index's entries
    cut: int = 0  # entries beyond MAX_ENTRIES, not read
    invalid: int = 0  # entries without a usable loc


def sitemap_key(run: str, url: str) -> str:
    """A sitemap's job in a run: keyed by its URL's digest (so one listed twice, or by itself, is one job)."""
    return f"{run}:sitemap-{hashlib.sha256(url.encode()).hexdigest()[:40]}"


def decompressed(body: bytes) -> bytes:
    """The file's bytes, gunzipped when they are gzip (whatever the type says); never more than
    MAX_SITEMAP_BYTES (``SitemapRefused`` beyond: the answer to a gzip bomb)."""
    if not body.startswith(b"\x1f\x8b"):
        if len(body) > MAX_SITEMAP_BYTES:
            raise SitemapRefused(f"the sitemap is larger than {MAX_SITEMAP_BYTES // (1024 * 1024)} MiB")
        return body
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, MAX_SITEMAP_BYTES + 1)
    except zlib.error as exc:
        raise SitemapRefused(f"the sitemap's gzip data is corrupt: {exc}") from None
    if len(data) > MAX_SITEMAP_BYTES or inflater.unconsumed_tail:
        raise SitemapRefused(
            f"the sitemap decompresses to more than {MAX_SITEMAP_BYTES // (1024 * 1024)} MiB: refused (a gzip bomb?)"
        )
    if not inflater.eof:
        raise SitemapRefused("the sitemap's gzip data is corrupt or cut short")
    return data


def sitemap_read(body: bytes) -> SitemapFile:
    """What a sitemap file lists (XML or text, gzip or not), at most MAX_ENTRIES entries."""
    data = decompressed(body)
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<"):
        return _text_read(data)
    try:
        return _xml_read(data)
    except (SafeElementTree.ParseError, DefusedXmlException) as exc:
        raise SitemapRefused(f"the sitemap is not XML a sitemap may be ({type(exc).__name__}: {exc})"[:500]) from None


def _text_read(data: bytes) -> SitemapFile:
    found = SitemapFile("text")
    for line in data.decode("utf-8", errors="replace").removeprefix("\ufeff").splitlines():
        line = line.strip()
        if not line:
            continue
        if len(found.pages) >= MAX_ENTRIES:
            found.cut += 1
            continue
        loc = _loc(line)
        if loc is None:
            found.invalid += 1
        else:
            found.pages.append((loc, None))
    return found


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _xml_read(data: bytes) -> SitemapFile:
    found: SitemapFile | None = None
    entries = 0
    events = SafeElementTree.iterparse(io.BytesIO(data), events=("start", "end"), forbid_dtd=True)
    for event, element in events:
        name = _local(element.tag)
        if found is None:
            if event == "start":
                if name not in ("urlset", "sitemapindex"):
                    raise SitemapRefused(f"the XML is no sitemap: its root is <{name[:50]}>")
                found = SitemapFile(name)
            continue
        if event != "end" or name not in ("url", "sitemap"):
            continue
        entries += 1
        if entries > MAX_ENTRIES:
            found.cut += 1
        elif name == "sitemap" and found.kind == "sitemapindex":
            loc = _loc(_child_text(element, "loc"))
            if loc is None:
                found.invalid += 1
            else:
                found.sitemaps.append(loc)
        elif name == "url" and found.kind == "urlset":
            loc = _loc(_child_text(element, "loc"))
            if loc is None:
                found.invalid += 1
            else:
                found.pages.append((loc, _lastmod(_child_text(element, "lastmod"))))
                for image in element:
                    if image.tag == f"{_IMAGE_NS}image":
                        image_loc = _loc(_child_text(image, "loc", _IMAGE_NS))
                        if image_loc is not None:
                            found.images.append((image_loc, loc))
        element.clear()  # what was read is let go: memory stays bounded by an entry, not the file
    if found is None:
        raise SitemapRefused("the sitemap is empty")
    return found


def _child_text(element, name: str, namespace: str = _SITEMAP_NS) -> str:
    for child in element:
        if child.tag in (f"{namespace}{name}", name):
            return (child.text or "").strip()
    return ""


def _loc(text: str) -> str | None:
    if not text or len(text.encode()) > MAX_URL_BYTES:
        return None
    try:
        url = url_normal(text)
    except ValueError:
        return None
    return None if url_problem(url) else url


def _lastmod(text: str) -> datetime | None:
    """A W3C datetime (``2026-12-07``, ``2026-12-07T10:00:00+01:00``, ``…Z``) as an aware datetime."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def unchanged_pages(pages: list[tuple[str, datetime | None]]) -> set[str]:
    """The listed pages whose ``lastmod`` is no later than their last full fetch: not crawled again."""
    dated = {url: lastmod for url, lastmod in pages if lastmod is not None}
    if not dated:
        return set()
    unchanged = set()
    urls = list(dated)
    for start in range(0, len(urls), SPAWN_CHUNK):
        chunk = urls[start : start + SPAWN_CHUNK]
        for url, fetched_at in PageState.objects.filter(url__in=chunk).values_list("url", "fetched_at"):
            if fetched_at is not None and dated[url] <= fetched_at:
                unchanged.add(url)
    return unchanged


def listed_images(found: SitemapFile, ignored: tuple[str, ...] = ()) -> list[FoundImage]:
    """An image sitemap's images, each with the page that shows it (the first page listing it),
    without the query parameters the source drops."""
    pages = {}
    for url, page in found.images:
        pages.setdefault(url_without_params(url, ignored), url_without_params(page, ignored))
    return [FoundImage(url, "sitemap image:loc", page_url=page) for url, page in pages.items()]


def sitemaps_of(source: Source, robots_sitemaps: tuple[str, ...], page_url: str) -> list[str]:
    """The sitemaps a source's run reads: its robots.txt's (in its scope), else ``/sitemap.xml``
    when the source asks for it."""
    if source.sitemaps == Source.Sitemaps.OFF:
        return []
    scope = source.effective_scope
    # RFC 9309 asks for absolute URLs; a relative one is read against the origin, as crawlers do.
    listed = [url for url in (_loc(urljoin(page_url, u)) for u in robots_sitemaps) if url and url_in_scope(url, scope)]
    if not listed and source.sitemaps == Source.Sitemaps.ROBOTS_OR_DEFAULT:
        listed = [url_normal(urljoin(page_url, "/sitemap.xml"))]
    return listed


def sitemap_children(run: str, source: Source, urls: list[str], chain: tuple[str, ...] = ()) -> list[Child]:
    return [
        Child(
            "sitemap",
            {"source_id": source.id, "url": url, "run": run, "chain": list(chain)},
            sitemap_key(run, url),
            source.priority,
            source.name,
            subject=url,
        )
        for url in urls
    ]
