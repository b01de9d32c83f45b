"""One fetch as the pipeline's handlers make it: robots.txt, then politeness, then the safe client.

``fetch_politely`` records two steps through the job context — ``robots`` (the decision and why) and
``fetch`` (status, size, final URL, time) — and turns HTTP statuses into the error classes the
engine routes: 404/410 are permanent (the page is gone), 429 and 503 transient with the site's
``Retry-After``, other 5xx transient, other 4xx permanent. A busy host defers the job (no retry
budget used); a robots.txt refusal returns the decision, and the handler ends the job as skipped.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from jobs.errors import PermanentError, TransientError
from jobs.services import url_host_key
from workers.pipeline import options
from workers.pipeline.http import (
    FetchPolicy,
    FetchResult,
    RedirectDisallowed,
    SafeClient,
    UnexpectedType,
    Validators,
)
from workers.pipeline.politeness import PolitenessPolicy, polite
from workers.pipeline.robots import RobotsDecision, robots_check
from workers.runtime.context import JobContext


class PageGone(PermanentError):
    """404 or 410: the resource is not there, and asking again will not bring it back."""


class ClientErrorStatus(PermanentError):
    """Another 4xx: the request itself is refused (forbidden, unauthorised, bad request)."""


class SiteUnavailable(TransientError):
    """429, 503 or another 5xx: the site asks us to come back later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Fetched:
    robots: RobotsDecision
    result: FetchResult | None  # None: robots.txt disallows the URL
    # With a second opinion that saw the copy: the status the crawler alone was answered.
    answered_the_crawler: int | None = None
    # other_types=True: the answer was of a type not asked for (result None; nothing downloaded).
    other_type: UnexpectedType | None = None

    @property
    def unchanged(self) -> bool:
        """The conditional request was answered 304: nothing was downloaded, nothing changed."""
        return self.result is not None and self.result.status == 304

    @property
    def validators(self) -> Validators:
        """What the answer said about its version (ETag, Last-Modified), for the next conditional request."""
        return Validators.of(self.result.headers) if self.result is not None else Validators()


def fetch_policy() -> FetchPolicy:
    return FetchPolicy(**options.current().fetch)


def politeness_policy() -> PolitenessPolicy:
    return PolitenessPolicy(**options.current().politeness)


@dataclass(frozen=True)
class SecondOpinion:
    """Ask again, at once and in the same politeness turn, as a browser asks (its user agent, its
    Accept headers) whenever the crawler's answer ``is_gone`` — and take that answer when it
    ``shows_the_copy`` (a browser's 403 or 404 leaves the crawler's answer standing):
    a site that hides a page from LeitstandBot alone is seen as people see it (rechecks;
    docs/rechecks.md)."""

    agent: str
    is_gone: Callable[[FetchResult], bool]
    shows_the_copy: Callable[[FetchResult], bool]  # only such an answer replaces the crawler's
    # The second request's own deadline, shorter than a fetch's (the job's time is shared with the
    # robots.txt fetch, the first fetch and the decodes; running out of it is a transient JobTimeout).
    total_seconds: float = 8.0


def fetch_politely(
    context: JobContext,
    url: str,
    *,
    accept: frozenset[str] | None,
    client: SafeClient | None = None,
    raise_for_status: bool = True,
    validators: Validators | None = None,
    second_opinion: SecondOpinion | None = None,
    other_types: bool = False,
    patience_seconds: float | None = None,
    steps: bool = True,
) -> Fetched:
    """``raise_for_status=False``: every status is an answer the caller judges (rechecks observe 404s).
    ``validators``: the last answer's ETag / Last-Modified, sent as a conditional request; a ``304``
    is then the answer "unchanged" (the ``fetch`` step's outcome), not an error.
    A redirect to a URL robots.txt disallows is not followed: the job's answer is that refusal.
    An answer of a type ``accept`` does not name is refused from its headers (``UnexpectedType``),
    counted as an answer for the host's politeness; ``other_types=True`` returns it as
    ``Fetched.other_type`` (the ``fetch`` step skipped) instead of raising.
    ``patience_seconds``: how long a resting host is waited for in place (default: after this job's
    own robots.txt request, ROBOTS_PATIENCE_SECONDS; else not at all). ``steps=False``: the
    ``robots`` and ``fetch`` steps are not recorded (a caller's own step says what happened)."""
    client = client or SafeClient(fetch_policy())
    client.check(url)  # a refused URL or address fails here, before its robots.txt is asked for
    known = context.shared.setdefault("robots", {})  # the files the batch's jobs read: once per batch
    host, policy = url_host_key(url), politeness_policy()
    asked_robots = []  # whether this job asked the host for its robots.txt just now (in the host's slot)

    def robots_slot():
        asked_robots.append(True)
        return polite(host, policy)

    step = context.step if steps else _unrecorded
    with step("robots", url=url) as info:
        decision = robots_check(url, client=client, known=known, slot=robots_slot)
        info.update(allowed=decision.is_allowed, reason=decision.reason)
        if not decision.is_allowed:
            info["skipped"] = True
            return Fetched(decision, None)

    def robots_refusal(target: str) -> str | None:
        # A redirect target's robots.txt within a short deadline of its own (usually the same origin,
        # whose file is cached) and through its host's slot: the page's own fetch deadline must still hold.
        target_host = url_host_key(target)
        hop = robots_check(
            target,
            client=_hop_client(client),
            known=known,
            slot=None if target_host == host else lambda: polite(target_host, policy),
        )
        return None if hop.is_allowed else hop.reason

    answered_the_crawler = None
    with step("fetch", url=url) as info:
        # Right after this job's own robots.txt request the host rests one delay: waited out in place
        # (up to ROBOTS_PATIENCE_SECONDS), not by going back into line.
        patience = (
            patience_seconds if patience_seconds is not None else ROBOTS_PATIENCE_SECONDS if asked_robots else 0.0
        )
        with polite(host, policy, crawl_delay=decision.crawl_delay, patience_seconds=patience) as outcome:
            try:
                result = client.fetch(url, accept=accept, validators=validators, hop_check=robots_refusal)
            except RedirectDisallowed as refused:
                outcome.update(ok=True, status="redirect disallowed")  # the host answered; robots.txt said no
                info.update(skipped=True, redirect_disallowed=str(refused)[:500])
                return Fetched(RobotsDecision(False, str(refused)), None)
            except UnexpectedType as other:
                outcome.update(ok=True, status=f"answered {other.content_type or 'without a type'}")
                if not other_types:
                    raise
                info.update(skipped=True, content_type=other.content_type[:100], final_url=other.url)
                return Fetched(decision, None, other_type=other)
            if second_opinion is not None and second_opinion.is_gone(result):
                other = _asked_as(client, second_opinion).fetch(url, accept=accept, hop_check=robots_refusal)
                info["second_opinion"] = other.status
                if second_opinion.shows_the_copy(other):
                    answered_the_crawler = info["answered_the_crawler"] = result.status
                    result = other
            retry_after = retry_after_seconds(result.headers.get("retry-after"))
            outcome.update(
                ok=result.status < 500 and result.status != 429,
                status=result.status,
                retry_after=retry_after,
                seconds=result.sent_seconds,
            )
        info.update(
            status=result.status,
            bytes=len(result.body),
            elapsed_ms=round(result.elapsed_seconds * 1000),
            final_url=result.final_url,
            redirects=len(result.redirects),
        )
        if result.status == 304 and validators:
            info["unchanged"] = True
        elif raise_for_status:
            _raise_for_status(result, retry_after)
    return Fetched(decision, result, answered_the_crawler)


@contextmanager
def _unrecorded(name: str, **data) -> Iterator[dict]:
    yield dict(data)


HOP_ROBOTS_SECONDS = 5.0
# The longest a job waits in place for the host's next turn after asking it for robots.txt; a longer
# delay (a Crawl-delay) hands the job back with its turn booked.
ROBOTS_PATIENCE_SECONDS = 10.0


def _hop_client(client: SafeClient) -> SafeClient:
    policy = replace(client.policy, total_seconds=min(client.policy.total_seconds, HOP_ROBOTS_SECONDS))
    return SafeClient(policy, resolver=client.resolver, allowed_targets=client.allowed_targets)


# What a browser sends besides its user agent: a request without them tells itself apart.
BROWSER_HEADERS = (
    ("Accept", "image/avif,image/webp,image/apng,image/*,text/html;q=0.9,*/*;q=0.8"),
    ("Accept-Language", "de-DE,de;q=0.9,en;q=0.8"),
)


def _asked_as(client: SafeClient, opinion: SecondOpinion) -> SafeClient:
    policy = replace(
        client.policy,
        user_agent=opinion.agent,
        headers=BROWSER_HEADERS,
        total_seconds=min(client.policy.total_seconds, opinion.total_seconds),
    )
    return SafeClient(policy, resolver=client.resolver, allowed_targets=client.allowed_targets)


def _raise_for_status(result: FetchResult, retry_after: float | None) -> None:
    status, url = result.status, result.final_url
    if status in (404, 410):
        raise PageGone(f"{url} answered {status}: gone")
    if status in (429, 503):
        raise SiteUnavailable(
            f"{url} answered {status}" + (f", Retry-After {retry_after:g} s" if retry_after else ""), retry_after
        )
    if status >= 500:
        raise SiteUnavailable(f"{url} answered {status}")
    if status >= 400:
        raise ClientErrorStatus(f"{url} answered {status}")
    if status >= 300:  # a redirect without Location, or 304: nothing usable came back
        raise ClientErrorStatus(f"{url} answered {status} without a usable redirect")


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # str.isdigit() is also true of '²', which float() refuses
        return float(min(int(value[:12]), 10**11)) if len(value) <= 12 else 1e11
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)
