"""robots.txt decisions per RFC 9309 (Robots Exclusion Protocol), in plain Python.

It replaces protego, which reads a file that begins with a UTF-8 byte-order mark as if its first group
were not there. Clauses implemented:

- §2.1/§2.2 syntax: records ``key: value``, keys case-insensitive, whitespace optional around both,
  ``#`` comments, CR, LF and CRLF line ends. Lines that cannot be read are skipped and every other
  line is still used (§2.3.1.5); the parser never raises.
- §2.2.1 groups: consecutive user-agent lines open one group; the crawler's product token is compared
  case-insensitively with each line's token; all matching groups are merged; without one the ``*``
  groups apply, merged too; without those nothing is disallowed.
- §2.2.2 rules: the match with the most octets wins, ``allow`` wins a tie, an empty value is no rule,
  rules before the first user-agent line are ignored, ``/robots.txt`` is always allowed, and paths are
  compared after percent-encoding normalisation (one ``_normalise`` for rule and URL alike).
- §2.2.3 special characters: ``*`` is any sequence, a final ``$`` anchors the end, and ``%2A`` /
  ``%24`` in a rule are a literal ``*`` / ``$`` of the URL.
- §2.2.4 other records (``Sitemap``, ``X-Foo``) never open or close a group.
- §2.3.1 access results, in ``decision_for_status``; §2.5 the 500 KiB limit, in ``within_limit``
  (a ``Disallow`` cut at the limit is kept, any other cut line dropped).

Decisions where the RFC leaves room:

- A rule that starts with neither ``/`` nor ``*`` (``Disallow: private``) breaks the §2.2 grammar; it is
  read as ``/private``, the path its author evidently meant, as most parsers do.
- The path given to ``is_allowed`` gets a leading ``/`` when it lacks one, so ``""`` means ``/``.
- "Octets" of a rule are counted on its normalised form, so ``/%62`` and ``/b`` are equally long.
- In the query, ``%2F``, ``%3A``, ``%40`` and ``%3F`` are decoded (they are plain data there, RFC 3986
  §3.4), which is how §2.2.2's example ``?baz=https://foo.bar`` matches ``?baz=https%3A%2F%2Ffoo.bar``.
- The user-agent value ``*`` stands for every crawler only on its own; ``*bot`` names no crawler.
- ``Crawl-delay`` (not in the RFC) is read as a member of its group, like a rule: it ends a run of
  user-agent lines, so ``User-agent: *``, ``Crawl-delay: 5``, ``User-agent: FooBot`` are two groups.
  The delay is taken from the applicable groups; when merged groups give several valid values, the
  largest wins, the polite reading of a file that contradicts itself.
- 429 Too Many Requests is "unreachable", not "unavailable": it reports load, not a missing file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

MAX_BYTES = 500 * 1024

Decision = Literal["rules", "allow_all", "disallow_all_retry"]

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_DECODED_IN_QUERY = _UNRESERVED | frozenset("/:@?")
# Everything else, an unpaired "%" included, is percent-encoded; "*" and "$" stay because in a rule
# they are §2.2.3's special characters (`_literal` encodes the ones that are plain characters).
_ESCAPE_OR_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~/:@?!&'()+,;=*$]")
_LINE_END = re.compile(r"\r\n|\r|\n")
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")
_DECIMAL = re.compile(r"\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _canonical(text: str, decoded: frozenset[str]) -> str:
    def replace(piece: re.Match[str]) -> str:
        octets = piece.group()
        if octets.startswith("%") and len(octets) == 3:
            character = chr(int(octets[1:], 16))
            return character if character in decoded else octets.upper()
        # Lone surrogates cannot be UTF-8; "surrogatepass" still gives them stable octets to compare.
        return "".join(f"%{octet:02X}" for octet in octets.encode("utf-8", "surrogatepass"))

    return _ESCAPE_OR_ENCODED.sub(replace, text)


def _normalise(text: str) -> str:
    """The canonical percent-encoding of a path and query, shared by rules and URLs (§2.2.2)."""
    path, question_mark, query = text.partition("?")
    return _canonical(path, _UNRESERVED) + question_mark + _canonical(query, _DECODED_IN_QUERY)


def _literal(text: str) -> str:
    """Encode plain ``*`` and ``$``: §2.2.3 has rules write them as ``%2A`` and ``%24``."""
    return text.replace("*", "%2A").replace("$", "%24")


def _agent_token(value: str) -> str:
    value = value.strip()
    token = _PRODUCT_TOKEN.match(value)
    if token:
        return token.group().lower()
    return "*" if value.split(maxsplit=1)[:1] == ["*"] else ""


def _parse_delay(value: str) -> float | None:
    # float() alone would also take "inf", "nan", "-1" and "1_0"; a delay is a plain decimal number.
    if not _DECIMAL.fullmatch(value):
        return None
    delay = float(value)
    return delay if math.isfinite(delay) else None


@dataclass(frozen=True)
class _Rule:
    is_allow: bool
    octets: int
    segments: tuple[str, ...]  # the literal pieces between the "*" wildcards
    is_anchored: bool  # ends with "$"

    @classmethod
    def compile(cls, value: str, *, is_allow: bool) -> _Rule:
        pattern = _normalise(value if value.startswith(("/", "*")) else "/" + value)
        is_anchored = pattern.endswith("$")
        body = pattern[:-1] if is_anchored else pattern
        return cls(is_allow, len(pattern), tuple(_literal(s) for s in body.split("*")), is_anchored)

    def matches(self, path: str) -> bool:
        # Taking each piece at its leftmost place is enough for "*"-only patterns, and it keeps the
        # cost linear, where a regular expression could backtrack for long on a hostile pattern.
        first, *rest = self.segments
        if not path.startswith(first):
            return False
        position = len(first)
        if not rest:
            return not self.is_anchored or position == len(path)
        *middle, last = rest
        for segment in middle:
            found = path.find(segment, position)
            if found < 0:
                return False
            position = found + len(segment)
        if self.is_anchored:
            return path.endswith(last) and len(path) - len(last) >= position
        return path.find(last, position) >= 0


@dataclass
class _Group:
    agents: set[str] = field(default_factory=set)
    rules: list[_Rule] = field(default_factory=list)
    crawl_delays: list[str] = field(default_factory=list)


def within_limit(data: bytes) -> bytes:
    """The first ``MAX_BYTES`` of a robots.txt, as fetched (pass one byte more, to tell a cut line).
    A line cut at the limit changes meaning: a cut ``Disallow`` still disallows what its prefix
    covers and more, so it is kept (the cautious reading for a crawler that must not fetch what a
    site disallowed); any other cut line (``Allow: /pub`` from ``Allow: /public/a``) is dropped."""
    if len(data) <= MAX_BYTES:
        return data
    cut_mid_line = data[MAX_BYTES : MAX_BYTES + 1] not in (b"\n", b"\r")
    data = data[:MAX_BYTES]
    if cut_mid_line:
        start = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if not data[start:].lstrip().lower().startswith(b"disallow"):
            return data[:start]
        try:
            data[start:].decode("utf-8")
        except UnicodeDecodeError as cut:
            if cut.end == len(data) - start:  # a character cut in half: keep the whole ones before it
                data = data[: start + cut.start]
    return data


def _lines(content: bytes | str) -> list[str]:
    """Bytes are limited here; text is taken as the caller limited it (text decoded with replacement
    characters grows when encoded again, and would be cut short)."""
    text = within_limit(bytes(content)).decode("utf-8", errors="replace") if not isinstance(content, str) else content
    return _LINE_END.split(text.removeprefix("\ufeff"))


MAX_SITEMAP_LINES = 50  # Sitemap: lines read from one file


class RobotsRules:
    """The parsed groups of one robots.txt; ask it what a crawler may fetch."""

    def __init__(self, groups: list[_Group], sitemaps: list[str] | None = None) -> None:
        self._groups = groups
        self.sitemaps = sitemaps or []  # the Sitemap: lines (§2.3.5: outside any group), in order

    @classmethod
    def parse(cls, content: bytes | str) -> RobotsRules:
        groups: list[_Group] = []
        sitemaps: list[str] = []
        group: _Group | None = None
        is_reading_agents = False
        for line in _lines(content):
            key, colon, value = line.partition("#")[0].partition(":")
            if not colon:
                continue
            key, value = key.strip().lower(), value.strip()
            if key == "sitemap":
                if value and len(sitemaps) < MAX_SITEMAP_LINES:
                    sitemaps.append(value)
            elif key == "user-agent":
                if group is None or not is_reading_agents:
                    group = _Group()
                    groups.append(group)
                    is_reading_agents = True
                group.agents.add(_agent_token(value))
            elif group is None:
                continue  # §2.2.2: records before the first user-agent line belong to no group.
            elif key in ("allow", "disallow"):
                is_reading_agents = False
                if value:  # an empty value matches nothing, so it is no rule at all
                    group.rules.append(_Rule.compile(value, is_allow=key == "allow"))
            elif key == "crawl-delay":
                is_reading_agents = False
                group.crawl_delays.append(value)
        return cls(groups, list(dict.fromkeys(sitemaps)))

    def _groups_for(self, product_token: str) -> list[_Group]:
        token = _agent_token(product_token)
        named = [group for group in self._groups if token not in ("", "*") and token in group.agents]
        return named or [group for group in self._groups if "*" in group.agents]

    def is_allowed(self, path_and_query: str, product_token: str) -> bool:
        path = _literal(_normalise(path_and_query if path_and_query.startswith("/") else "/" + path_and_query))
        if path.partition("?")[0] == "/robots.txt":
            return True
        best: tuple[int, bool] | None = None
        for group in self._groups_for(product_token):
            for rule in group.rules:
                # Comparing (octets, is_allow) makes the longer match win and allow win a tie.
                if rule.matches(path) and (best is None or (rule.octets, rule.is_allow) > best):
                    best = (rule.octets, rule.is_allow)
        return best is None or best[1]

    def crawl_delay(self, product_token: str) -> float | None:
        """The applicable groups' ``Crawl-delay`` in seconds, uncapped; None when none is valid."""
        delays = (_parse_delay(value) for group in self._groups_for(product_token) for value in group.crawl_delays)
        return max((delay for delay in delays if delay is not None), default=None)


@dataclass(frozen=True)
class Status:
    """The HTTP status a robots.txt fetch ended with; None when no answer came at all."""

    code: int | None

    @property
    def decision(self) -> Decision:
        return decision_for_status(self.code)


def decision_for_status(status: int | None) -> Decision:
    """What a robots.txt fetch's final status means (§2.3.1); the fetcher has followed redirects."""
    if status is not None and 200 <= status < 300:
        return "rules"
    # 4xx is "unavailable" (§2.3.1.3). A 3xx here means more redirects than were followed, which
    # §2.3.1.2 lets us treat as unavailable too. 429 asks the crawler to slow down: not "no file".
    if status is not None and 300 <= status < 500 and status != 429:
        return "allow_all"
    # 5xx or no answer is "unreachable" (§2.3.1.4): disallow everything and ask again soon. So are
    # 1xx and codes outside HTTP's range, which say nothing about the file either.
    return "disallow_all_retry"
