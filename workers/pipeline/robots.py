"""robots.txt per RFC 9309, parsed with protego, cached in PostgreSQL for every worker on every host.

- 2xx: the rules apply (the first 500 KiB are parsed, as RFC 9309 requires at least that much);
- 4xx ("unavailable"): everything is allowed;
- 5xx or unreachable: everything is disallowed, and the answer is cached only briefly, so the site
  is asked again soon;
- a fetched answer is cached for at most 24 hours (database time);
- ``Crawl-delay`` is reported for the politeness rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from protego import Protego

from jobs.errors import JobError
from jobs.models import LeitstandNow
from workers.pipeline.http import SafeClient
from workers.pipeline.models import RobotsFile

USER_AGENT_TOKEN = "LeitstandBot"
MAX_ROBOTS_BYTES = 500 * 1024
CACHE_FOR = timedelta(hours=24)
CACHE_UNREACHABLE_FOR = timedelta(minutes=10)


@dataclass(frozen=True)
class RobotsDecision:
    is_allowed: bool
    reason: str
    crawl_delay: float | None = None


def robots_check(url: str, *, client: SafeClient | None = None) -> RobotsDecision:
    """May ``url`` be fetched? Uses the cached robots.txt of its origin, fetching it when stale."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    host = (
        f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    )  # an IPv6 literal keeps its brackets
    origin = f"{parts.scheme}://{host}:{port}"
    robots = RobotsFile.objects.filter(origin=origin, expires_at__gt=LeitstandNow()).first() or _refresh(
        origin, client or SafeClient()
    )
    if robots.status is None or robots.status >= 500:
        return RobotsDecision(
            False,
            f"robots.txt of {origin} is unreachable ({robots.error or robots.status}): "
            "everything is disallowed until it answers",
        )
    if robots.status >= 400:
        return RobotsDecision(True, f"robots.txt of {origin} is unavailable ({robots.status}): everything is allowed")
    rules = Protego.parse(robots.body)
    delay = rules.crawl_delay(USER_AGENT_TOKEN)
    if rules.can_fetch(url, USER_AGENT_TOKEN):
        return RobotsDecision(True, f"allowed by robots.txt of {origin}", delay)
    return RobotsDecision(False, f"disallowed by robots.txt of {origin}", delay)


def _refresh(origin: str, client: SafeClient) -> RobotsFile:
    status, body, error = None, "", ""
    try:
        result = client.fetch(f"{origin}/robots.txt", truncate_at=MAX_ROBOTS_BYTES)
        status, body = result.status, result.body.decode("utf-8", errors="replace").replace("\x00", "")
    except JobError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    fresh_for = CACHE_FOR if status is not None and status < 500 else CACHE_UNREACHABLE_FOR
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
    return robots
