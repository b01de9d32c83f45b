"""robots.txt per RFC 9309 (``workers/pipeline/robotstxt.py``), cached in PostgreSQL for every
worker on every host, and parsed once per process and version.

- 2xx: the rules apply (the first 500 KiB are parsed, as RFC 9309 requires at least that much);
- 4xx ("unavailable", §2.3.1.3): everything is allowed;
- 5xx, 429 or unreachable (§2.3.1.4): everything is disallowed *and the crawler tries again later* —
  the job fails transiently (``RobotsUnreachable``: retried with backoff while its budget lasts, then
  the dead-letter queue with that reason), never "skipped" as if the site had said no; the answer is
  cached only briefly, so the site is asked again soon;
- a fetched answer is cached for at most 24 hours (database time);
- ``Crawl-delay`` is reported for the politeness rules (which cap it).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.db.models import DurationField, ExpressionWrapper, F

from jobs.errors import JobError, TransientError
from jobs.models import LeitstandNow
from workers.pipeline.http import SafeClient, url_canonical
from workers.pipeline.models import RobotsFile
from workers.pipeline.robotstxt import MAX_BYTES, RobotsRules, decision_for_status, within_limit

USER_AGENT_TOKEN = "LeitstandBot"
MAX_ROBOTS_BYTES = MAX_BYTES
CACHE_FOR = timedelta(hours=24)
CACHE_UNREACHABLE_FOR = timedelta(minutes=10)
# Parsed files kept per process, by the size of their text: a 500 KiB robots.txt took ~250 ms to
# parse, for every job of its site, and its rules take ~6 MB in memory (so bytes, not a count).
PARSED_KEPT_BYTES = 2 * 2**20


class RobotsUnreachable(TransientError):
    """The site's robots.txt could not be read (5xx, 429, a timeout, a refused connection): RFC 9309
    says complete disallow, and try again later."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RobotsDecision:
    is_allowed: bool
    reason: str
    crawl_delay: float | None = None
    sitemaps: tuple[str, ...] = ()  # the file's Sitemap: lines


def robots_check(
    url: str,
    *,
    client: SafeClient | None = None,
    known: dict | None = None,
    slot: Callable[[], AbstractContextManager[dict]] | None = None,
) -> RobotsDecision:
    """May ``url`` be fetched? Uses the cached robots.txt of its origin, fetching it when stale;
    ``RobotsUnreachable`` when the site's robots.txt cannot be read now. ``known``: the files read
    before by the same batch of jobs (``JobContext.shared``), each used until it expires. ``slot``:
    the host's politeness slot (``politeness.polite``), which a fetch of robots.txt goes through like
    any other request to the host (its block gets the answer's ``ok``, ``status`` and ``seconds``)."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    host = (
        f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    )  # an IPv6 literal keeps its brackets
    origin = f"{parts.scheme}://{host}:{port}"
    robots = _robots_file(origin, client, {} if known is None else known, slot)
    decision = decision_for_status(robots.status)
    if decision == "disallow_all_retry":
        raise RobotsUnreachable(
            f"robots.txt of {origin} is unreachable ({robots.error or robots.status}): nothing is fetched "
            "until it answers",
            retry_after=CACHE_UNREACHABLE_FOR.total_seconds(),
        )
    if decision == "allow_all":
        return RobotsDecision(True, f"robots.txt of {origin} is unavailable ({robots.status}): everything is allowed")
    rules = _parsed(robots)
    delay = rules.crawl_delay(USER_AGENT_TOKEN)
    # The path the server receives (dot segments removed), not as the link spelled it.
    path = (urlsplit(url_canonical(url)).path or "/") + (f"?{parts.query}" if parts.query else "")
    sitemaps = tuple(rules.sitemaps)
    if rules.is_allowed(path, USER_AGENT_TOKEN):
        return RobotsDecision(True, f"allowed by robots.txt of {origin}", delay, sitemaps)
    return RobotsDecision(False, f"disallowed by robots.txt of {origin}", delay, sitemaps)


def _robots_file(origin: str, client: SafeClient | None, known: dict, slot) -> RobotsFile:
    """The origin's cached file: as read before into ``known`` while it is fresh, else from the
    database (with how long it stays fresh, in database time), else fetched now. Freshness in
    ``known`` is counted on this process's monotonic clock from the read: no wall clock decides."""
    kept = known.get(origin)
    if kept is not None and time.monotonic() < kept[0]:
        return kept[1]
    robots = (
        RobotsFile.objects.filter(origin=origin, expires_at__gt=LeitstandNow())
        .annotate(fresh_for=ExpressionWrapper(F("expires_at") - LeitstandNow(), output_field=DurationField()))
        .first()
    )
    if robots is None:
        with slot() if slot is not None else nullcontext({}) as outcome:
            robots, fresh_for = _refresh(origin, client or SafeClient(), outcome)
    else:
        fresh_for = robots.fresh_for
    known[origin] = (time.monotonic() + fresh_for.total_seconds(), robots)
    return robots


_parsed_lock = threading.Lock()
# origin → (the version's fetch time, its rules, what it counts against PARSED_KEPT_BYTES)
_parsed_files: OrderedDict[str, tuple[object, RobotsRules, int]] = OrderedDict()


def _parsed(robots: RobotsFile) -> RobotsRules:
    """The file's rules, parsed once per process for each version fetched (a newer version of an
    origin replaces the older one). At most ``PARSED_KEPT_BYTES`` of text is kept parsed, each file
    counted as at least 1 KiB, so the number of files is bounded too."""
    with _parsed_lock:
        kept = _parsed_files.get(robots.origin)
        if kept is not None and kept[0] == robots.fetched_at:
            _parsed_files.move_to_end(robots.origin)
            return kept[1]
    rules = RobotsRules.parse(robots.body)
    with _parsed_lock:
        _parsed_files[robots.origin] = (robots.fetched_at, rules, max(len(robots.body), 1024))
        _parsed_files.move_to_end(robots.origin)
        total = sum(size for _, _, size in _parsed_files.values())
        while total > PARSED_KEPT_BYTES and len(_parsed_files) > 1:
            total -= _parsed_files.popitem(last=False)[1][2]
    return rules


def _refresh(origin: str, client: SafeClient, outcome: dict) -> tuple[RobotsFile, timedelta]:
    """The origin's robots.txt fetched and cached now, and how long it stays fresh; ``outcome``: what
    the host's politeness slot learns of the answer."""
    status, body, error = None, "", ""
    try:
        # One byte more than is parsed, to tell a line cut at the limit (within_limit).
        result = client.fetch(f"{origin}/robots.txt", truncate_at=MAX_ROBOTS_BYTES + 1)
        status = result.status
        outcome.update(ok=status < 500 and status != 429, status=status, seconds=result.sent_seconds)
        body = within_limit(result.body).decode("utf-8", errors="replace").replace("\x00", "")
    except JobError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    fresh_for = CACHE_UNREACHABLE_FOR if decision_for_status(status) == "disallow_all_retry" else CACHE_FOR
    robots, _ = RobotsFile.objects.update_or_create(
        origin=origin,
        defaults={
            "status": status,
            "body": body if status is not None and status < 300 else "",
            "error": error,
            "fetched_at": LeitstandNow(),
            "expires_at": LeitstandNow() + fresh_for,
        },
    )
    robots.refresh_from_db()
    return robots, fresh_for
