"""What a crawled page shows: its images and links, read from its HTML (``extract``)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

from workers.pipeline.http import url_canonical, url_problem

# What a step records of the URLs it had to leave out: enough to see why.
SHOWN_REFUSALS = 10


@dataclass
class Extracted:
    images: list[str]
    links: list[str]
    # URLs left out (too long for the records, control characters), the first few with why.
    unusable: list[dict] = field(default_factory=list)
    unusable_count: int = 0


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
