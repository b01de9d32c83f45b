"""robots.txt per RFC 9309 against a real local server, cached in PostgreSQL."""

from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.errors import ErrorKind, classify
from tests.support.hostile_server import HostileServer
from workers.pipeline import robots
from workers.pipeline.http import FetchPolicy, SafeClient
from workers.pipeline.models import RobotsFile
from workers.pipeline.robots import RobotsUnreachable, robots_check

pytestmark = pytest.mark.django_db


@pytest.fixture
def server():
    with HostileServer() as running:
        yield running


def client_for(server, **policy):
    return SafeClient(FetchPolicy(**policy), allowed_targets=frozenset({server.target}))


def test_rules_apply_and_crawl_delay_is_reported(server):
    server.robots = (200, b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n", 0)
    client = client_for(server)
    refused = robots_check(server.url("/private/page"), client=client)
    allowed = robots_check(server.url("/gallery/1"), client=client)
    assert (refused.is_allowed, allowed.is_allowed) == (False, True)
    assert refused.reason.startswith("disallowed by robots.txt") and allowed.crawl_delay == 2
    assert server.requests == ["/robots.txt"], "the second check used the cache"


def test_an_unavailable_robots_txt_allows_everything(server):
    server.robots = (404, b"", 0)
    assert robots_check(server.url("/anything"), client=client_for(server)).is_allowed


def test_an_unreachable_robots_txt_disallows_everything_and_is_asked_again_soon(server, db_clock):
    """RFC 9309 §2.3.1.4: complete disallow, and try again later — a transient failure of the job,
    never "skipped" as if the site had said no."""
    server.robots = (503, b"busy", 0)
    with pytest.raises(RobotsUnreachable, match=r"unreachable \(503\)") as unreachable:
        robots_check(server.url("/page"), client=client_for(server))
    assert unreachable.value.retry_after == 600 and classify(unreachable.value) == ErrorKind.TRANSIENT
    server.robots = (200, b"User-agent: *\nAllow: /\n", 0)
    db_clock.advance(11 * 60)  # past the short cache of an unreachable answer
    assert robots_check(server.url("/page"), client=client_for(server)).is_allowed
    assert server.requests == ["/robots.txt", "/robots.txt"]


def test_a_robots_txt_that_times_out_disallows_everything(server):
    server.robots = (200, b"User-agent: *\nAllow: /\n", 3.0)
    with pytest.raises(RobotsUnreachable, match="FetchTimeout"):
        robots_check(server.url("/page"), client=client_for(server, total_seconds=1, read_timeout=1))


def test_only_the_first_500_kib_of_a_600_kib_file_are_parsed(server):
    early = b"User-agent: *\nDisallow: /early\n"
    filler = b"# " + b"x" * 1000 + b"\n"
    late = b"User-agent: *\nDisallow: /late\n"
    body = early + filler * 615 + late  # about 600 KiB; the late rule sits beyond 500 KiB
    assert len(body) >= 600 * 1024
    server.robots = (200, body, 0)
    client = client_for(server)
    assert not robots_check(server.url("/early/x"), client=client).is_allowed
    assert robots_check(server.url("/late/x"), client=client).is_allowed
    assert 499 * 1024 < len(RobotsFile.objects.get().body.encode()) <= 500 * 1024  # a cut comment line dropped


def test_a_fetched_robots_txt_is_cached_for_at_most_a_day(server, db_clock):
    server.robots = (200, b"User-agent: *\nDisallow: /a\n", 0)
    robots_check(server.url("/x"), client=client_for(server))
    db_clock.advance(23 * 3600)
    robots_check(server.url("/x"), client=client_for(server))
    assert server.requests == ["/robots.txt"]
    db_clock.advance(2 * 3600)
    server.robots = (200, b"User-agent: *\nDisallow: /x\n", 0)
    assert not robots_check(server.url("/x"), client=client_for(server)).is_allowed
    assert server.requests == ["/robots.txt", "/robots.txt"]


def test_an_ipv6_origin_keeps_its_brackets_and_its_robots_txt_is_read():
    with HostileServer("::1") as server:
        server.robots = (200, b"User-agent: *\nDisallow: /private\n", 0)
        decision = robots_check(server.url("/private/x"), client=client_for(server))
        assert not decision.is_allowed and decision.reason.startswith("disallowed by robots.txt")
        assert server.requests == ["/robots.txt"]
        assert RobotsFile.objects.get().origin == f"http://[::1]:{server.port}"


def test_a_batch_reads_an_origins_robots_txt_once_while_it_is_fresh(server, monkeypatch):
    server.robots = (200, b"User-agent: *\nDisallow: /private\n", 0)
    client, known = client_for(server), {}  # ``known``: what a batch's jobs share (JobContext.shared)
    assert robots_check(server.url("/a"), client=client, known=known).is_allowed  # fetched and cached
    with CaptureQueriesContext(connection) as queries:
        decisions = [robots_check(server.url(p), client=client, known=known).is_allowed for p in ("/b", "/private/c")]
    assert decisions == [True, False] and len(queries) == 0
    later = robots.time.monotonic() + 24 * 3600 + 1  # past the day the file is fresh for
    monkeypatch.setattr(robots, "time", SimpleNamespace(monotonic=lambda: later))
    with CaptureQueriesContext(connection) as queries:
        assert robots_check(server.url("/d"), client=client, known=known).is_allowed
    assert any("workers_robotsfile" in q["sql"] for q in queries), "past its freshness it is read again"
    assert server.requests == ["/robots.txt"], "still fresh in the database: not fetched again"
