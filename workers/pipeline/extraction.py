"""What a crawled page shows: every image a person or a share preview sees, and its links, read
from its HTML (``extract``) and its stylesheets (``stylesheet_images``).

An image is found in ``img`` (``src``, ``srcset`` parsed as the HTML standard does, the lazy
loaders' ``data-*`` attributes), ``picture``/``source``, ``noscript`` fallbacks, ``amp-img``,
``video poster``, SVG ``image``, share tags (``og:image``, ``twitter:image``, ``link
rel=image_src``, ``link rel=preload as=image``), JSON-LD, microdata ``itemprop=image`` and CSS
backgrounds (``style`` attributes, ``<style>`` blocks, linked stylesheets). One element shows one
image: the largest of its sizes is the candidate, the others its variants. Each image says where it
was found (``found_in``). ``data:``, ``javascript:`` and other values that name no fetchable image
are counted (``ignored``), never recorded; a broken block (invalid JSON-LD) is named in
``problems`` and hides nothing else. See docs/crawler.md, "What a crawl reads".
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import tinycss2

from workers.pipeline.http import url_normal, url_problem

# What a step records of the URLs it had to leave out: enough to see why.
SHOWN_REFUSALS = 10
# Bounds on what one page may make the extractor do (a hostile page is as long as the fetch allows).
MAX_VARIANTS = 10  # sizes kept of one image
MAX_JSON_LD_BYTES = 256 * 1024  # per block
MAX_JSON_LD_BLOCKS = 20
MAX_JSON_NODES = 20_000  # values walked per block
MAX_CSS_CHARS = 512 * 1024  # of <style> blocks and style attributes per page, and per stylesheet
MAX_STYLESHEETS = 5  # linked stylesheets per page
MAX_PROBLEMS = 10

# Links to these are images, not pages: candidates for the analysis (the types it reads).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".webp"})
# Images the analysis cannot read: such a link is neither a page nor a candidate.
OTHER_IMAGE_EXTENSIONS = frozenset({".svg", ".svgz", ".avif", ".bmp", ".tif", ".tiff", ".heic", ".ico"})


@dataclass
class FoundImage:
    url: str
    found_in: str  # where on the page: "img srcset", "meta og:image", "json-ld", "css <style>", …
    variants: list[str] = field(default_factory=list)  # the same image's other sizes
    page_url: str = ""  # the page that shows it, when not the one read (an image sitemap's entry)


@dataclass
class Extracted:
    images: list[FoundImage]
    links: list[str]
    stylesheets: list[str] = field(default_factory=list)  # linked (rel=stylesheet), for stylesheet_images
    # URLs left out (too long for the records, control characters), the first few with why.
    unusable: list[dict] = field(default_factory=list)
    unusable_count: int = 0
    # Values that name no fetchable resource, counted by kind: "data:", "javascript:", "empty", …
    ignored: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # a broken block, named (invalid JSON-LD)

    @property
    def image_urls(self) -> list[str]:
        return [image.url for image in self.images]


def content_charset(content_type: str) -> str:
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
    """Every image and link of a page, absolute (against the page's URL and its first ``<base
    href>``), normalised (``http.url_normal``), http(s) only, NUL-free and de-duplicated in page
    order. Never raises on what a page holds."""
    text = body.decode(page_codec(charset), errors="replace")
    parser = _PageParser(base_url)
    parser.feed(text.replace("\x00", ""))
    parser.close()
    return parser.result()


def stylesheet_images(css: str, *, url: str) -> Extracted:
    """The background images a linked stylesheet gives (``url()`` resolved against the stylesheet)."""
    reader = _Reader(url)
    reader.css(css, "css stylesheet")
    return reader.result()


# --- srcset, per the HTML standard ("parse a srcset attribute") ----------------------------------

_ASCII_WHITESPACE = "\t\n\f\r "
_FLOAT = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


def srcset_parse(value: str) -> tuple[list[tuple[str, float]], int]:
    """The candidates of a ``srcset`` as (URL, size) — size the width of a ``w`` descriptor, else
    the density of an ``x`` one (1 without) — and how many candidates were dropped as invalid. A URL
    may hold commas (only trailing ones end it); a descriptor may follow any ASCII whitespace."""
    candidates: list[tuple[str, float, str]] = []
    dropped = 0
    position, end = 0, len(value)
    while True:
        while position < end and (value[position] in _ASCII_WHITESPACE or value[position] == ","):
            position += 1
        if position >= end:
            break
        start = position
        while position < end and value[position] not in _ASCII_WHITESPACE:
            position += 1
        url = value[start:position]
        descriptors: list[str] = []
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            position, descriptors = _srcset_descriptors(value, position)
        size = _srcset_size(descriptors)
        if size is None or not url:
            dropped += 1
        else:
            candidates.append((url, *size))
    # Widths and densities are not compared with each other: the widths win when a set mixes them.
    if any(kind == "w" for _, _, kind in candidates):
        dropped += sum(kind != "w" for _, _, kind in candidates)
        candidates = [c for c in candidates if c[2] == "w"]
    return [(url, size) for url, size, _ in candidates], dropped


def _srcset_descriptors(value: str, position: int) -> tuple[int, list[str]]:
    end = len(value)
    while position < end and value[position] in _ASCII_WHITESPACE:
        position += 1
    descriptors: list[str] = []
    current = ""
    in_parens = False
    while position < end:
        character = value[position]
        position += 1
        if in_parens:
            current += character
            if character == ")":
                in_parens = False
        elif character in _ASCII_WHITESPACE:
            if current:
                descriptors.append(current)
                current = ""
        elif character == ",":
            break
        else:
            current += character
            if character == "(":
                in_parens = True
    if current:
        descriptors.append(current)
    return position, descriptors


def _srcset_size(descriptors: list[str]) -> tuple[float, str] | None:
    """(size, "w" or "x") of a candidate's descriptors, None when they are invalid."""
    size: tuple[float, str] | None = None
    for descriptor in descriptors:
        number, kind = descriptor[:-1], descriptor[-1:].lower()
        if size is not None and kind in "wx":
            return None  # two sizes for one candidate
        if kind == "w" and number.isascii() and number.isdigit() and int(number) > 0:
            size = (float(int(number)), "w")
        elif kind == "x" and _FLOAT.match(number) and float(number) >= 0:
            size = (float(number), "x")
        elif kind != "h" or not (number.isascii() and number.isdigit()):
            return None  # h is allowed beside w (future use); anything else invalidates the candidate
    return size or (1.0, "x")


# --- the page ------------------------------------------------------------------------------------

_TAB_AND_NEWLINE = {ord("\t"): None, ord("\n"): None, ord("\r"): None}
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
# The lazy loaders' attributes (lazysizes, WP Rocket, jQuery lazyload, lozad, Slick, …), in the
# order an element's own image is taken from them when it has no srcset.
LAZY_SRC = ("data-lazy-src", "data-src", "data-original", "data-lazy")
LAZY_SRCSET = ("data-srcset", "data-lazy-srcset")
LAZY_BACKGROUND = ("data-bg", "data-background-image")
SHARE_META = frozenset({"og:image", "og:image:url", "og:image:secure_url", "twitter:image", "twitter:image:src"})
JSON_LD_IMAGE_KEYS = ("image", "thumbnailUrl", "contentUrl")
# contentUrl names the item's own file: a video's or a song's is no image.
NOT_IMAGE_TYPES = frozenset({"VideoObject", "AudioObject", "MusicRecording", "Clip", "Movie", "Episode"})


class _Reader:
    """What the page parser and the stylesheet reader share: URLs resolved, checked and collected."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.images: dict[str, FoundImage] = {}
        self.links: dict[str, None] = {}
        self.stylesheets: dict[str, None] = {}
        self.unusable: list[dict] = []
        self.unusable_count = 0
        self.ignored: dict[str, int] = {}
        self.problems: list[str] = []
        self.css_budget = MAX_CSS_CHARS

    def result(self) -> Extracted:
        return Extracted(
            images=list(self.images.values()),
            links=list(self.links),
            stylesheets=list(self.stylesheets)[:MAX_STYLESHEETS],
            unusable=self.unusable,
            unusable_count=self.unusable_count,
            ignored=self.ignored,
            problems=self.problems,
        )

    def absolute(self, raw: str, base: str | None = None) -> str | None:
        """``raw`` as an absolute, normalised http(s) URL, or None (counted or named as unusable)."""
        # As browsers read an attribute's URL: tabs and line breaks inside are dropped, C0 controls
        # and spaces around it stripped (WHATWG URL standard).
        raw = raw.translate(_TAB_AND_NEWLINE).strip(_C0_AND_SPACE)
        if not raw:
            self.ignore("empty")
            return None
        scheme = raw.split(":", 1)[0].lower() if ":" in raw[:12] else ""
        if scheme in ("data", "javascript", "about", "blob", "mailto", "tel"):
            self.ignore(f"{scheme}:")
            return None
        try:
            url = url_normal(urljoin(base or self.base_url, raw))  # dot segments removed as the client sends it
            scheme = url.partition(":")[0] if ":" in url else ""
        except ValueError:  # e.g. an invalid IPv6 literal or port
            self.ignore("unparsable")
            return None
        if scheme not in ("http", "https"):
            self.ignore(f"{scheme}:" if scheme else "unparsable")
            return None
        problem = url_problem(url)
        if problem:
            self.unusable_count += 1
            if len(self.unusable) < SHOWN_REFUSALS:
                # As readable text that any record holds (a control character or a surrogate escaped).
                self.unusable.append({"url": ascii(url[:200])[1:-1], "reason": problem})
            return None
        return url

    def ignore(self, kind: str) -> None:
        self.ignored[kind] = self.ignored.get(kind, 0) + 1

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text[:300])

    def image(self, sizes: list[tuple[str, float, str]], base: str | None = None) -> None:
        """One image in its sizes, (raw URL, size, where found) each: the largest is the candidate,
        the others its variants. A URL already found keeps its first place and gains the variants."""
        resolved = []
        for raw, size, found_in in sizes:
            url = self.absolute(raw, base)
            if url is not None:
                resolved.append((url, size, found_in))
        if not resolved:
            return
        best = max(resolved, key=lambda r: r[1])  # the first of equals: max keeps the first
        urls = list(dict.fromkeys(url for url, _, _ in resolved))
        image = self.images.get(best[0])
        if image is None:
            image = self.images[best[0]] = FoundImage(best[0], best[2])
        for url in urls:
            if url != image.url and url not in image.variants and len(image.variants) < MAX_VARIANTS:
                image.variants.append(url)

    def srcset(self, value: str, found_in: str) -> list[tuple[str, float, str]]:
        candidates, dropped = srcset_parse(value)
        if dropped:
            self.ignore("srcset candidate unparsable")
        return [(url, size, found_in) for url, size in candidates]

    # CSS ------------------------------------------------------------------------------------

    def css(self, text: str, found_in: str) -> None:
        """The background images of CSS (a ``style`` attribute, a ``<style>`` block, a stylesheet).

        Each ``background``/``background-image`` declaration is found by its name wherever it stands
        (any rule, any nesting: ``@media`` inside ``@supports``), comments removed first, its value
        taken up to the ``;``, ``{`` or ``}`` that ends it (quoted strings and parentheses kept
        whole), and only that value tokenised by tinycss2: tokenising a whole stylesheet cost three
        times the rest of a large page's reading (docs/performance.md)."""
        if not text or self.css_budget <= 0:
            return
        text = text[: self.css_budget]
        self.css_budget -= len(text)
        lowered = text.lower()
        if "url(" not in lowered and "image-set" not in lowered:  # no image can be named
            return
        for declaration in _BACKGROUND_DECLARATION.finditer(_CSS_COMMENT.sub(" ", text)):
            value = declaration.group(1)
            if "url(" in value.lower() or "image-set" in value.lower():
                for raw in _css_urls(tinycss2.parse_component_value_list(value, skip_comments=True)):
                    self.image([(raw, 1.0, found_in)])


_CSS_COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)
# A background declaration's value: up to what ends it, a quoted string or a parenthesised group
# (url(a;b.jpg), image-set(…); one the text ends inside, as CSS closes it) whole. Each alternative starts with its own character: linear time.
_BACKGROUND_DECLARATION = re.compile(
    r"""(?<![\w-])background(?:-image)?\s*:((?:"[^"]*"|'[^']*'|\([^)]*(?:\)|\Z)|[^;{}"'(])*)""", re.I
)


def _css_urls(tokens) -> list[str]:
    """The URLs of a declaration's value: ``url(…)`` quoted or not, and ``image-set()``'s strings."""
    urls: list[str] = []
    stack = [(list(tokens), False)]
    while stack:
        values, in_image_set = stack.pop()
        for token in values:
            if token.type == "url":
                urls.append(token.value)
            elif token.type == "string" and in_image_set:
                urls.append(token.value)
            elif token.type == "function":
                if token.lower_name == "url":
                    urls.extend(t.value for t in token.arguments if t.type == "string")
                else:
                    stack.append((token.arguments, token.lower_name in ("image-set", "-webkit-image-set")))
            elif token.type in ("() block", "[] block", "{} block"):
                stack.append((token.content, in_image_set))
    return urls


class _PageParser(HTMLParser, _Reader):
    def __init__(self, base_url: str) -> None:
        HTMLParser.__init__(self, convert_charrefs=True)
        _Reader.__init__(self, base_url)
        self.has_base = False
        self.json_ld: list[str] | None = None  # the text of the JSON-LD block being read
        self.json_ld_blocks = 0
        self.style: list[str] | None = None  # the text of the <style> block being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "base":
            # The first base element with an href sets the document's base URL (HTML standard).
            if "href" in values and not self.has_base:
                self.has_base = True
                self.base_url = self.absolute(values["href"]) or self.base_url
            return
        if tag in ("img", "amp-img", "source"):
            self._element_image(tag, values)
        elif tag in ("a", "area") and "href" in values:
            self._link(values["href"])
        elif tag == "meta":
            name = (values.get("property") or values.get("name") or "").strip().lower()
            if name in SHARE_META and "content" in values:
                self.image([(values["content"], 1.0, f"meta {name}")])
        elif tag == "link":
            self._link_element(values)
        elif tag == "video" and "poster" in values:
            self.image([(values["poster"], 1.0, "video poster")])
        elif tag == "image":  # SVG
            href = values.get("href") or values.get("xlink:href")
            if href is not None:
                self.image([(href, 1.0, "svg image")])
        elif tag == "script" and values.get("type", "").split(";")[0].strip().lower() == "application/ld+json":
            self.json_ld = []
        elif tag == "style":
            self.style = []
        if "image" in values.get("itemprop", "").split() and tag not in ("img", "amp-img", "source"):
            raw = values.get("content") if tag == "meta" else values.get("href") or values.get("src")
            if raw is not None:
                self.image([(raw, 1.0, f"microdata {tag} itemprop=image")])
        if tag not in ("img", "amp-img", "source"):
            for name in LAZY_SRC + LAZY_BACKGROUND:
                if name in values:
                    self._background(values[name], tag, name)
            for name in LAZY_SRCSET:
                if name in values:
                    self.image(self.srcset(values[name], f"{tag} {name}"))
        if "style" in values:
            self.css(values["style"], "css style attribute")

    def _element_image(self, tag: str, values: dict[str, str]) -> None:
        """An img (amp-img, source) shows one image: the largest of its srcsets, else its lazy
        loader's source, else its src; the others are its variants."""
        sizes = []
        for name in ("srcset", *LAZY_SRCSET):
            if name in values:
                sizes += self.srcset(values[name], f"{tag} {name}")
        # Without sizes of their own, the single sources rank below every srcset candidate: a lazy
        # loader's (the real image) above src (often a placeholder).
        for rank, name in enumerate(("src", *reversed(LAZY_SRC), *LAZY_BACKGROUND)):
            if name in values and not (tag == "source" and name == "src"):  # a video's or audio's file
                sizes.append((values[name], -100.0 + rank, f"{tag} {name}"))
        if "itemprop" in values and "image" in values["itemprop"].split():
            sizes = [(raw, size, found_in + " (itemprop=image)") for raw, size, found_in in sizes]
        self.image(sizes)

    def _background(self, value: str, tag: str, name: str) -> None:
        stripped = value.strip()
        if stripped[:4].lower() == "url(":
            for raw in _css_urls(tinycss2.parse_component_value_list(stripped)):
                self.image([(raw, 1.0, f"{tag} {name}")])
        else:
            self.image([(value, 1.0, f"{tag} {name}")])

    def _link_element(self, values: dict[str, str]) -> None:
        rel = values.get("rel", "").lower().split()
        if "image_src" in rel and "href" in values:
            self.image([(values["href"], 1.0, "link rel=image_src")])
        if "preload" in rel and values.get("as", "").strip().lower() == "image":
            sizes = (
                self.srcset(values["imagesrcset"], "link rel=preload imagesrcset") if "imagesrcset" in values else []
            )
            if "href" in values:
                sizes.append((values["href"], -1.0 if sizes else 1.0, "link rel=preload"))
            self.image(sizes)
        if "stylesheet" in rel and "alternate" not in rel and "href" in values:
            url = self.absolute(values["href"])
            if url is not None:
                self.stylesheets[url] = None

    def _link(self, href: str) -> None:
        url = self.absolute(href)
        if url is None:
            return
        extension = _extension(url)
        if extension in IMAGE_EXTENSIONS:
            self.image([(url, 1.0, "a href (an image file)")])
        elif extension in OTHER_IMAGE_EXTENSIONS:
            self.ignore("link to an image the analysis cannot read")
        else:
            self.links[url] = None

    def handle_data(self, data: str) -> None:
        if self.json_ld is not None:
            self.json_ld.append(data)
        elif self.style is not None:
            self.style.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self.json_ld is not None:
            text, self.json_ld = "".join(self.json_ld), None
            self._read_json_ld(text)
        elif tag == "style" and self.style is not None:
            text, self.style = "".join(self.style), None
            self.css(text, "css <style>")

    def close(self) -> None:
        super().close()
        self.handle_endtag("script")  # a block the page never closed is read as far as it goes
        self.handle_endtag("style")

    def _read_json_ld(self, text: str) -> None:
        self.json_ld_blocks += 1
        block = self.json_ld_blocks
        if block > MAX_JSON_LD_BLOCKS:
            self.ignore("JSON-LD block beyond the page's bound")
            return
        if len(text.encode()) > MAX_JSON_LD_BYTES:
            self.problem(f"JSON-LD block {block}: longer than {MAX_JSON_LD_BYTES // 1024} KB, not read")
            return
        try:
            document = json.loads(text)
        except RecursionError:
            self.problem(f"JSON-LD block {block}: nested too deeply")
            return
        except ValueError as exc:
            self.problem(f"JSON-LD block {block}: invalid JSON ({exc})")
            return
        for raw in _json_ld_images(document):
            self.image([(raw, 1.0, "json-ld")])


def _json_ld_images(document) -> list[str]:
    """The image URLs of a JSON-LD document: ``image``, ``thumbnailUrl`` and ``contentUrl`` of any
    item (not a video's or a song's contentUrl), as strings, image objects (their ``url`` or
    ``contentUrl``) or lists, at any depth (``@graph`` included), walking at most MAX_JSON_NODES values."""
    urls: list[str] = []
    stack = [document]
    walked = 0
    while stack and walked < MAX_JSON_NODES:
        node = stack.pop()
        walked += 1
        if isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, dict):
            types = node.get("@type")
            types = set(types) if isinstance(types, list) else {types}
            for key in JSON_LD_IMAGE_KEYS:
                if key == "contentUrl" and types & NOT_IMAGE_TYPES:
                    continue
                urls.extend(_json_ld_urls(node.get(key)))
            stack.extend(reversed([v for k, v in node.items() if isinstance(v, (dict, list))]))
    return urls


def _json_ld_urls(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [v for v in (value.get("contentUrl"), value.get("url")) if isinstance(v, str)][:1]
    if isinstance(value, list):
        return [url for item in value[: MAX_VARIANTS * 5] if not isinstance(item, list) for url in _json_ld_urls(item)]
    return []


def _extension(url: str) -> str:
    path = urlsplit(url).path
    name = path.rsplit("/", 1)[-1]
    return ("." + name.rsplit(".", 1)[-1].lower()) if "." in name else ""
