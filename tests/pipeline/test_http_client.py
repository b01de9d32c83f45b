"""The safe HTTP client against real local servers: the SSRF guard refuses before any request, and
hostile responses fail with a clear error class within the deadline and bounded memory.

No test opens a connection to a non-loopback address: public addresses appear only through a stub
resolver, in cases the guard must refuse before connecting."""

import time
import tracemalloc

import pytest

from tests.support.hostile_server import HostileServer
from workers.pipeline.http import (
    AddressRefused,
    FetchPolicy,
    FetchRefused,
    FetchTimeout,
    ResponseRefused,
    SafeClient,
    TooManyRedirects,
    address_problem,
)

IMAGES = frozenset({"image/png", "image/jpeg"})


@pytest.fixture
def server():
    with HostileServer() as running:
        yield running


def allowing(server, **policy):
    return SafeClient(FetchPolicy(**policy), allowed_targets=frozenset({server.target}))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fc00::1",
        "fe80::1",
        "::ffff:169.254.169.254",
        "::ffff:127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "224.0.0.1",
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::ffff:0:7f00:1",  # SIIT 127.0.0.1
        "fec0::1",  # site-local (deprecated)
        "192.0.0.8",  # IETF protocol assignments
        "198.18.0.1",
        "240.0.0.1",
        "2001:db8::1",
        "100::1",
    ],
)
def test_non_public_addresses_are_refused(address):
    assert address_problem(address) is not None


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "2606:4700::1111", "64:ff9b::5db8:d822", "::ffff:93.184.216.34", "8.8.8.8"]
)
def test_public_addresses_pass(address):
    assert address_problem(address) is None


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.1", "127.1", "[::1]", "localhost"]
)
def test_loopback_in_any_spelling_is_refused_before_any_request(server, host):
    client = SafeClient(FetchPolicy(allowed_ports=frozenset({server.port})), allowed_targets=frozenset())
    with pytest.raises(AddressRefused, match="not a public address"):
        client.fetch(f"http://{host}:{server.port}/ok")
    assert server.requests == []


def test_one_private_address_among_public_ones_is_enough_to_refuse():
    client = SafeClient(resolver=lambda host, port: ["93.184.216.34", "10.0.0.5"], allowed_targets=frozenset())
    with pytest.raises(AddressRefused, match="10.0.0.5"):
        client.fetch("https://images.example/a.jpg")


def test_a_metadata_endpoint_behind_a_name_is_refused():
    client = SafeClient(resolver=lambda host, port: ["169.254.169.254"], allowed_targets=frozenset())
    with pytest.raises(AddressRefused):
        client.fetch("http://metadata.example/latest/meta-data/")


@pytest.mark.parametrize(
    "url,message",
    [
        ("ftp://images.example/a.jpg", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("http://user:secret@images.example/", "user information"),
        ("http://images.example:8080/", "port 8080 is not allowed"),
        ("http:///nohost", "without host"),
    ],
)
def test_urls_outside_the_rules_are_refused(url, message):
    with pytest.raises(FetchRefused, match=message):
        SafeClient(resolver=lambda host, port: ["93.184.216.34"], allowed_targets=frozenset()).fetch(url)


def test_an_allow_listed_target_is_fetched_from_the_validated_address(server):
    result = allowing(server).fetch(server.url("/ok"))
    assert (result.status, result.body, result.address) == (200, b"hello", "127.0.0.1")
    assert server.requests == ["/ok"]


def test_the_answer_is_timed_from_when_the_request_went_out(server):
    """Politeness counts a host's delay from the request's start: the client times it from the moment
    its head went out, after the address checks and the connection."""
    result = allowing(server).fetch(server.url("/slow"))
    assert result.sent_seconds is not None and 0.1 <= result.sent_seconds <= result.elapsed_seconds


def test_a_redirect_to_a_target_that_is_not_allowed_is_refused_at_that_hop(server):
    with HostileServer() as other:
        with pytest.raises(AddressRefused):
            allowing(server, allowed_ports=frozenset({other.port})).fetch(
                server.url(f"/redirect?to={other.url('/ok')}")
            )
        assert other.requests == []
    assert len(server.requests) == 1


def test_a_redirect_loop_ends_after_the_limit(server):
    with pytest.raises(TooManyRedirects, match="more than 5 redirects"):
        allowing(server).fetch(server.url("/loop"))
    assert len(server.requests) == 6


def test_a_dripping_server_is_cut_off_at_the_total_deadline(server):
    started = time.monotonic()
    with pytest.raises(FetchTimeout, match="deadline of 2 s"):
        allowing(server, total_seconds=2, read_timeout=5).fetch(server.url("/drip"))
    assert time.monotonic() - started < 2 + 1


def test_a_server_dripping_its_headers_is_cut_off_at_the_total_deadline(server):
    started = time.monotonic()
    with pytest.raises(FetchTimeout, match="deadline of 2 s"):
        allowing(server, total_seconds=2, read_timeout=5).fetch(server.url("/drip-headers"))
    assert time.monotonic() - started < 2 + 1


def test_a_huge_body_is_refused_with_bounded_memory(server):
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(ResponseRefused, match="exceeds 1048576 bytes"):
            allowing(server, max_body_bytes=2**20).fetch(server.url("/big"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5
    assert peak < 16 * 2**20


def test_a_gzip_bomb_is_refused_as_it_inflates(server):
    tracemalloc.start()
    try:
        with pytest.raises(ResponseRefused, match="decoded"):
            allowing(server, max_body_bytes=2**20).fetch(server.url("/bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_a_lying_content_length_is_a_malformed_response(server):
    with pytest.raises(ResponseRefused, match="malformed response"):
        allowing(server).fetch(server.url("/lying-length"))


def test_oversized_headers_are_refused(server):
    with pytest.raises(ResponseRefused):
        allowing(server, max_header_bytes=16 * 2**10).fetch(server.url("/huge-headers"))


def test_content_type_and_magic_bytes_must_agree(server):
    assert allowing(server).fetch(server.url("/png"), accept=IMAGES).status == 200
    with pytest.raises(ResponseRefused, match="bytes do not match"):
        allowing(server).fetch(server.url("/fake-png"), accept=IMAGES)
    with pytest.raises(ResponseRefused, match="is text/plain"):
        allowing(server).fetch(server.url("/ok"), accept=IMAGES)


@pytest.mark.django_db
def test_the_fetch_command_says_what_happened(server, settings):
    import io

    from django.core.management import CommandError, call_command

    settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [server.target]
    out = io.StringIO()
    call_command("fetch", server.url("/png"), "--image", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("robots: robots.txt of http://127.0.0.1:") and "unavailable (404)" in lines[0]
    assert lines[1].startswith(f"fetched {server.url('/png')}  status 200  72 bytes")
    with pytest.raises(CommandError, match="refused: ResponseRefused: .* bytes do not match"):
        call_command("fetch", server.url("/fake-png"), "--image")
    server.robots = (200, b"User-agent: *\nDisallow: /ok\n", 0)
    from workers.pipeline.models import RobotsFile

    RobotsFile.objects.all().delete()
    with pytest.raises(CommandError, match="refused: robots.txt: disallowed"):
        call_command("fetch", server.url("/ok"), stdout=io.StringIO())


def test_an_internationalised_host_goes_out_in_idna(server):
    looked_up = []

    def resolver(host, port):
        looked_up.append(host)
        return ["127.0.0.1"]

    client = SafeClient(
        FetchPolicy(allowed_ports=frozenset({server.port})),
        resolver=resolver,
        allowed_targets=frozenset({f"bücher.example:{server.port}"}),
    )
    result = client.fetch(f"http://bücher.example:{server.port}/ok")
    assert result.status == 200
    assert looked_up == ["xn--bcher-kva.example"]
    assert server.hosts == [f"xn--bcher-kva.example:{server.port}"]


@pytest.mark.parametrize(
    "etag, kept",
    [
        ('"abc123"', '"abc123"'),
        ('W/"weak"', 'W/"weak"'),
        ('"' + "a" * 300 + '"', ""),  # too long to send back
        ('"caf\u00e9"', ""),  # not ASCII
        ('"a\\tb"'.replace("\\t", "\t"), ""),  # a control character
    ],
)
def test_only_safe_validators_are_kept_for_the_next_conditional_request(etag, kept):
    import httpx

    from workers.pipeline.http import Validators

    # As received: raw bytes (a site's non-ASCII arrives decoded as Latin-1).
    raw = [(b"etag", etag.encode("latin-1")), (b"last-modified", b"Mon, 30 Nov 2026 08:00:00 GMT")]
    validators = Validators.of(httpx.Headers(raw))
    assert validators.etag == kept
    assert validators.request_headers()["If-Modified-Since"] == "Mon, 30 Nov 2026 08:00:00 GMT"
    assert ("If-None-Match" in validators.request_headers()) == bool(kept)


def test_a_fetch_in_a_traced_job_hands_the_site_no_trace_context(server):
    """The crawler never tells the sites it fetches its callers' trace IDs (docs/api.md, "Trace context")."""
    from jobs import tracing

    with tracing.attached("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "php=core"):
        assert tracing.current()[0], "the trace is current while the fetch runs"
        allowing(server).fetch(f"http://{server.target}/ok")
    (names,) = server.header_names
    assert "user-agent" in names and not names & {"traceparent", "tracestate", "baggage"}


def test_with_spans_each_hop_of_a_fetch_is_a_client_span_and_the_site_still_learns_nothing(server, spans):
    from opentelemetry.trace import SpanKind, StatusCode

    from jobs import tracing

    with tracing.span("process crawl") as attempt:
        result = allowing(server).fetch(f"http://{server.target}/redirect?to=/ok")
        assert allowing(server).fetch(f"http://{server.target}/missing").status == 404
    assert result.status == 200
    hops = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    statuses = [(span.name, span.attributes["http.response.status_code"]) for span in hops]
    assert statuses == [("GET", 302), ("GET", 200), ("GET", 404)]
    assert all(span.parent.span_id == attempt.get_span_context().span_id for span in hops)
    assert hops[0].attributes["url.full"] == f"http://{server.target}/redirect?to=/ok"
    assert hops[2].status.status_code is StatusCode.ERROR and hops[2].attributes["error.type"] == "404"
    assert all(not names & {"traceparent", "tracestate", "baggage"} for names in server.header_names)
