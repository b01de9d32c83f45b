"""The one safe HTTP client for crawl, analysis and recheck: every response is treated as hostile.

Guarantees (see docs/crawler.md):
- http and https only, allowed ports only, no user information in URLs;
- the host is resolved once, and the request refused if *any* address lies in an IANA
  special-purpose range (``SPECIAL_PURPOSE``: loopback, private, link-local and cloud metadata,
  shared 100.64.0.0/10, 192.0.0.0/24, site-local fec0::/10, Teredo, documentation, …); IPv6 forms
  that carry an IPv4 address (mapped, SIIT, IPv4-compatible, NAT64, 6to4) are judged by that address,
  and numeric spellings such as 2130706433, 0x7f.1 or 0177.0.0.1 resolve to what they mean; the connection then goes to the validated address (no second
  lookup, so DNS rebinding cannot redirect it), with the original Host header and TLS server name;
- redirects are followed by hand, each hop checked again, at most ``max_redirects``;
- a total wall-clock deadline on top of httpx's inactivity timeouts, over connect, TLS, the status
  line, the headers and the body (a server dripping a byte at a time never trips a read timeout);
  a limit on the *decoded* body (gzip bombs) and on headers, and an optional content-type
  allow-list checked against the body's magic bytes.

``LEITSTAND_HTTP_ALLOWED_TARGETS`` may allow-list exact ``host:port`` pairs (the demo web, tests);
never address ranges. It is empty in production.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import time
import zlib
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpcore
import httpx
import idna

from jobs import tracing
from jobs.errors import PermanentError, TransientError
from workers.pipeline import options

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# The IANA special-purpose address registries (IPv4: RFC 6890 and its updates; IPv6 likewise), kept
# here rather than taken from ``ipaddress.is_global``, whose answers differ between Python 3.11, 3.12
# and 3.13. No crawled URL may reach an address in any of them, whatever its spelling.
SPECIAL_PURPOSE = tuple(
    (ipaddress.ip_network(network), name)
    for network, name in (
        ("0.0.0.0/8", "this network"),
        ("10.0.0.0/8", "private use"),
        ("100.64.0.0/10", "shared address space"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link local"),
        ("172.16.0.0/12", "private use"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.31.196.0/24", "AS112"),
        ("192.52.193.0/24", "AMT"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private use"),
        ("192.175.48.0/24", "direct delegation AS112"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment routing"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link local"),
        ("fec0::/10", "site local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)
# IPv6 ranges that carry an IPv4 address: the address is judged by the IPv4 address inside.
EMBEDDED_IPV4 = tuple(
    (ipaddress.ip_network(network), extract)
    for network, extract in (
        ("::ffff:0:0/96", lambda ip: int(ip) & 0xFFFFFFFF),  # IPv4-mapped
        ("::ffff:0:0:0/96", lambda ip: int(ip) & 0xFFFFFFFF),  # SIIT (IPv4-translated)
        ("::/96", lambda ip: int(ip) & 0xFFFFFFFF),  # IPv4-compatible (deprecated)
        ("64:ff9b::/96", lambda ip: int(ip) & 0xFFFFFFFF),  # NAT64
        ("64:ff9b:1::/48", lambda ip: int(ip) & 0xFFFFFFFF),  # local-use NAT64
        ("2002::/16", lambda ip: (int(ip) >> 80) & 0xFFFFFFFF),  # 6to4
    )
)
REDIRECTS = {301, 302, 303, 307, 308}

# Magic bytes of the content types the pipeline accepts as images.
MAGIC = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # followed by the size and b"WEBP", checked below
}


# A URL's limit in UTF-8 bytes: below the b-tree limit of the unique indexes that hold URLs
# (Candidate.image_url, PageState.url: about 2,700 bytes a key), whatever its characters — 1,900 CJK
# characters are 5,700 bytes. The crawl skips a longer link (and names it); the client refuses it.
MAX_URL_BYTES = 2000


_UNRECORDABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be fetched or recorded, or None: http(s) only, at most ``MAX_URL_BYTES``
    bytes, no ASCII control characters (httpx raises its own error for them, on every try) and no lone
    surrogates (UTF-8 cannot hold them)."""
    if _UNRECORDABLE.search(url):
        return "contains a control character or a lone surrogate"
    if len(url.encode()) > MAX_URL_BYTES:
        return f"longer than {MAX_URL_BYTES} bytes"
    try:
        scheme = urlsplit(url).scheme
    except ValueError as exc:
        return f"malformed: {exc}"
    if scheme not in ("http", "https"):
        return f"only http and https are fetched, not {scheme or 'a URL without scheme'}"
    return None


def url_canonical(url: str) -> str:
    """``url`` as the client sends it: its path's dot segments removed (RFC 3986 §5.2.4), ``%2E``
    read as the ``.`` it encodes. What robots.txt, a source's scope and the records judge must be the
    path the server receives: ``/a/../private/x`` is ``/private/x`` on the wire."""
    parts = urlsplit(url)
    path = _DOT_ENCODED.sub(".", parts.path)
    if "." not in path:
        return url
    return parts._replace(path=remove_dot_segments(path) or "/").geturl()


_DOT_ENCODED = re.compile("%2[eE]")
_PERCENT = re.compile("%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _percent_normal(match: re.Match) -> str:
    # RFC 3986 §6.2.2.2: an unreserved character's escape is that character; other escapes in upper case.
    character = chr(int(match.group(1), 16))
    return character if character in _UNRESERVED else match.group(0).upper()


def url_normal(url: str) -> str:
    """``url`` as the key of what it names (RFC 3986 §6.2.2–6.2.3): scheme and host in lower case,
    the scheme's default port and the fragment dropped, an empty path made ``/``, dot segments
    removed, escapes of unreserved characters decoded and the others' hex in upper case. Every
    spelling it merges is the same request on the wire; the query's order and values are kept (a
    server may read ``?a=1&b=2`` and ``?b=2&a=1`` differently). Raises ValueError as ``urlsplit``
    does for what is not a URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    netloc = parts.netloc
    if parts.hostname is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        host = hostport.lower()
        port = parts.port  # ValueError for a port out of range or not a number
        if port is not None and port == _DEFAULT_PORTS.get(scheme):
            host = host.rsplit(":", 1)[0]
        elif port is None and host.endswith(":"):
            host = host[:-1]  # "http://h:/" names the default port
        netloc = f"{userinfo}@{host}" if userinfo else host
    path = _PERCENT.sub(_percent_normal, parts.path)
    if "." in path:
        path = remove_dot_segments(path)
    if not path and scheme in _DEFAULT_PORTS and netloc:
        path = "/"
    query = _PERCENT.sub(_percent_normal, parts.query)
    return urlunsplit((scheme, netloc, path, query, ""))


def url_without_params(url: str, ignored: tuple[str, ...]) -> str:
    """``url`` without the query parameters a source's rules drop (tracking, sizes): each of
    ``ignored`` a name, or with a trailing ``*`` a prefix (``utm_*``). The rest keep their order."""
    if not ignored or "?" not in url:
        return url
    parts = urlsplit(url)
    kept = [
        pair
        for pair in parts.query.split("&")
        if not any(
            pair.split("=", 1)[0].startswith(rule[:-1]) if rule.endswith("*") else pair.split("=", 1)[0] == rule
            for rule in ignored
        )
    ]
    return urlunsplit(parts._replace(query="&".join(kept)))


def remove_dot_segments(path: str) -> str:
    kept: list[str] = []
    segments = path.split("/")
    for segment in segments:
        if segment == "..":
            if len(kept) > 1:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    if segments[-1] in (".", ".."):
        kept.append("")  # "/a/.." is the directory "/", not the file ""
    return "/".join(kept)


class FetchRefused(PermanentError):
    """The client refused the request before sending it (URL, address, redirect rules)."""


class AddressRefused(FetchRefused):
    """The target resolves to an address that is not globally routable (SSRF guard)."""


class TooManyRedirects(FetchRefused):
    pass


class RedirectDisallowed(FetchRefused):
    """A redirect led where the caller may not go (robots.txt disallows the target)."""


class ResponseRefused(PermanentError):
    """The response broke a limit: body or header size, content type, magic bytes."""


class UnexpectedType(ResponseRefused):
    """The answer's declared type is not one the caller asked for (refused from its headers, before
    its body is read): the server answered fine, with something else — a page link to an image."""

    def __init__(self, message: str, *, content_type: str, url: str) -> None:
        super().__init__(message)
        self.content_type = content_type
        self.url = url


class FetchTimeout(TransientError):
    """The total deadline passed (or a connect/read timeout fired)."""


class FetchFailed(TransientError):
    """The connection failed (refused, reset, DNS failure)."""


Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchFailed(f"cannot resolve {host}: {exc}") from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def ascii_name(host: str) -> str:
    """A host as DNS and TLS know it: an internationalised name in IDNA 2008 (``xn--…``), an IP
    literal unchanged."""
    if ":" in host or host.replace(".", "").isdigit():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise FetchRefused(f"host {host!r} is not a valid internationalised name: {exc}") from None


def host_header(target) -> str:
    """The Host header: the ASCII name (an IPv6 literal in brackets), with the port unless default."""
    name = ascii_name(target.host)
    name = f"[{name}]" if ":" in name else name
    default = {"http": 80, "https": 443}[target.scheme]
    return name + ("" if target.port == default else f":{target.port}")


def address_problem(address: str) -> str | None:
    """Why this address must not be contacted, or None if it is in no special-purpose range."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.version == 6:
        for network, extract in EMBEDDED_IPV4:
            if ip in network:
                embedded = ipaddress.IPv4Address(extract(ip))
                inner = address_problem(str(embedded))
                return f"{ip} embeds {embedded}, which {inner}" if inner else None
    for network, name in SPECIAL_PURPOSE:
        if ip in network:
            return f"{ip} is not a public address ({name}, {network})"
    return None


class _DeadlineStream(httpcore.NetworkStream):
    """A connection that gives every read, write and TLS handshake at most what is left of the fetch's
    total deadline: a server that drips its status line or headers a byte at a time, just inside each
    read timeout, is cut off at the deadline like one that drips its body."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner, self._deadline = inner, deadline

    def _left(self, timeout: float | None) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the fetch's total deadline passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, self._left(timeout)), self._deadline)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: float) -> None:
        self._inner, self._deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("the fetch's total deadline passed")
        timeout = left if timeout is None else min(timeout, left)
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("the safe client connects over TCP only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


@cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings (certifi's CA bundle), made once per process: loading the bundle
    takes ~20 ms, more than a whole fetch from a fast site. A configured context is shared safely."""
    return httpx.create_ssl_context(trust_env=False)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport on connections bounded by one wall-clock deadline (connect, TLS, the status
    line, headers and body together); httpx itself only bounds each single read."""

    def __init__(self, deadline: float) -> None:
        super().__init__(verify=_tls_context(), trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=self._pool._ssl_context, network_backend=_DeadlineBackend(deadline), max_connections=1
        )


@dataclass(frozen=True)
class Validators:
    """What a resource's last answer said about its version, to ask whether it changed since."""

    etag: str = ""
    last_modified: str = ""

    @classmethod
    def of(cls, headers: httpx.Headers) -> Validators:
        """From an answer's headers: only values that are safe to send back (printable, bounded)."""
        return cls(_header_value(headers.get("etag", "")), _header_value(headers.get("last-modified", "")))

    def request_headers(self) -> dict[str, str]:
        return {
            name: value
            for name, value in (("If-None-Match", self.etag), ("If-Modified-Since", self.last_modified))
            if value
        }

    def __bool__(self) -> bool:
        return bool(self.etag or self.last_modified)


def _header_value(value: str) -> str:
    """A validator we may send back as a request header: printable ASCII, at most 200 characters (a
    hostile site's other bytes would break every later request for the URL)."""
    value = value.strip()
    return value if len(value) <= 200 and value.isascii() and value.isprintable() else ""


@dataclass(frozen=True)
class FetchPolicy:
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    total_seconds: float = 20.0
    max_body_bytes: int = 10 * 2**20
    max_header_bytes: int = 64 * 2**10
    max_redirects: int = 5
    allowed_ports: frozenset[int] = frozenset({80, 443})
    user_agent: str = "LeitstandBot/1.0 (+https://leitstand.example/bot)"
    # Further request headers (a recheck's second opinion asks as a browser asks).
    headers: tuple[tuple[str, str], ...] = ()


# When this fetch's first request head went out (httpcore's trace event), per fetch and thread.
_first_sent: ContextVar[list[float] | None] = ContextVar("first_sent", default=None)


def _note_sent(event: str, info: dict) -> None:
    if event.endswith("send_request_headers.started"):
        sent = _first_sent.get()
        if sent is not None and not sent:
            sent.append(time.monotonic())


@dataclass
class FetchResult:
    url: str
    final_url: str
    status: int
    headers: httpx.Headers
    body: bytes
    elapsed_seconds: float
    redirects: list[str] = field(default_factory=list)
    address: str = ""
    # From the first request's head going out to the last byte (politeness counts a host's delay from
    # when a request went out, not from when the worker began to prepare it); None: nothing was sent.
    sent_seconds: float | None = None


@dataclass(frozen=True)
class _Target:
    url: str
    scheme: str
    host: str
    port: int
    address: str


class SafeClient:
    def __init__(
        self,
        policy: FetchPolicy | None = None,
        *,
        resolver: Resolver = system_resolver,
        allowed_targets: frozenset[str] | None = None,
    ) -> None:
        self.policy = policy or FetchPolicy()
        self.resolver = resolver
        self.allowed_targets = frozenset(
            options.current().http_allowed_targets if allowed_targets is None else allowed_targets
        )

    def fetch(
        self,
        url: str,
        *,
        accept: frozenset[str] | None = None,
        truncate_at: int | None = None,
        validators: Validators | None = None,
        hop_check: Callable[[str], str | None] | None = None,
    ) -> FetchResult:
        """GET ``url`` under every guard; ``accept`` limits content types (checked by magic bytes).

        ``truncate_at``: keep only the first bytes of a longer body instead of refusing it (robots.txt).
        ``validators``: what an earlier answer said (ETag, Last-Modified), sent as ``If-None-Match`` /
        ``If-Modified-Since``: an unchanged resource answers ``304`` without a body.
        ``hop_check``: asked about every redirect target; a reason it returns refuses the hop
        (``RedirectDisallowed``), e.g. robots.txt disallowing it.
        """
        started = time.monotonic()
        deadline = started + self.policy.total_seconds
        redirects: list[str] = []
        current = url
        target = self._validate(current)
        sent = _first_sent.set([])
        try:
            while True:
                status, headers, body = self._request(target, deadline, accept, truncate_at, validators)
                if status in REDIRECTS and "location" in headers:
                    if len(redirects) >= self.policy.max_redirects:
                        raise TooManyRedirects(f"more than {self.policy.max_redirects} redirects from {url}")
                    redirects.append(current)
                    try:
                        current = url_canonical(urljoin(current, headers["location"]))
                    except ValueError as exc:  # e.g. an unclosed IPv6 literal in Location
                        raise FetchRefused(f"{url} redirects to a malformed URL: {exc}") from None
                    target = self._validate(current)  # the URL rules and the address guard, then the caller's
                    refused = hop_check(current) if hop_check else None
                    if refused:
                        raise RedirectDisallowed(f"{url} redirects to {current[:200]}: {refused}")
                    continue
                ended, went_out = time.monotonic(), _first_sent.get()
                return FetchResult(
                    url=url,
                    final_url=current,
                    status=status,
                    headers=headers,
                    body=body,
                    elapsed_seconds=ended - started,
                    redirects=redirects,
                    address=target.address,
                    sent_seconds=ended - went_out[0] if went_out else None,
                )
        finally:
            _first_sent.reset(sent)

    def check(self, url: str) -> None:
        """Raise the refusal ``fetch`` would raise for ``url`` before sending anything (URL rules and
        the SSRF guard), so a caller can refuse early, e.g. before asking the site's robots.txt."""
        self._validate(url)

    def _validate(self, url: str) -> _Target:
        problem = url_problem(url)
        if problem:
            raise FetchRefused(f"URL {url[:200]!r} refused: {problem}")
        try:
            parts = urlsplit(url)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError as exc:
            raise FetchRefused(f"malformed URL {url!r}: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise FetchRefused(f"only http and https are fetched, not {parts.scheme or 'a URL without scheme'}")
        if parts.username is not None or parts.password is not None:
            raise FetchRefused("URLs with user information are refused")
        host = parts.hostname
        if not host:
            raise FetchRefused(f"URL without host: {url!r}")
        is_allow_listed = f"{host}:{port}" in self.allowed_targets
        if port not in self.policy.allowed_ports and not is_allow_listed:
            raise FetchRefused(f"port {port} is not allowed (allowed: {sorted(self.policy.allowed_ports)})")
        addresses = self.resolver(ascii_name(host), port)
        if not addresses:
            raise FetchFailed(f"{host} resolves to no address")
        if not is_allow_listed:
            for address in addresses:
                problem = address_problem(address)
                if problem:
                    raise AddressRefused(f"{host} resolves to {address}: {problem}")
        return _Target(url=url, scheme=parts.scheme, host=host, port=port, address=addresses[0])

    def post(self, url: str, *, body: bytes, headers: dict[str, str], propagate: bool = False) -> int:
        """POST ``body`` to ``url`` under the same guards as a fetch — the address checked once and
        the connection made to that very address (a DNS answer that changes between the check and
        the POST cannot redirect it), one total deadline — without following a redirect. Returns the
        status; the answer's body is read within the limits and dropped. For webhooks; ``propagate``:
        the receiver joins the trace (W3C ``traceparent`` of this request's span)."""
        deadline = time.monotonic() + self.policy.total_seconds
        status, _, _ = self._request(
            self._validate(url), deadline, None, None, method="POST", content=body, extra=headers, propagate=propagate
        )
        return status

    def _request(
        self,
        target: _Target,
        deadline: float,
        accept,
        truncate_at,
        validators: Validators | None = None,
        *,
        method: str = "GET",
        content: bytes | None = None,
        extra: dict[str, str] | None = None,
        propagate: bool = False,
    ):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchTimeout(f"deadline of {self.policy.total_seconds:g} s passed before {target.url}")
        address = f"[{target.address}]" if ":" in target.address else target.address
        parts = urlsplit(target.url)
        pinned = parts._replace(netloc=f"{address}:{target.port}").geturl()
        timeout = httpx.Timeout(
            connect=min(self.policy.connect_timeout, remaining),
            read=min(self.policy.read_timeout, remaining),
            write=min(5.0, remaining),
            pool=1.0,
        )
        headers = {
            "Host": host_header(target),
            "User-Agent": self.policy.user_agent,
            "Accept-Encoding": "gzip, deflate",
            **dict(self.policy.headers),
            **(validators.request_headers() if validators else {}),
            **(extra or {}),
        }
        # A client span when traces are recorded (jobs/tracing.py). Only a receiver that joins the trace
        # (``propagate``: the PHP core's webhooks) is sent its context: a crawled site never learns
        # an internal trace ID, whatever its page or redirect asks for.
        with tracing.client_span(method, target.host, target.port, target.url if method == "GET" else "") as span:
            if propagate:
                headers.update(tracing.headers())
            status, response_headers, body = self._send(
                target, deadline, timeout, pinned, headers, method, content, truncate_at, accept
            )
            tracing.answered(span, status)
        if accept is not None and status not in REDIRECTS and 200 <= status < 300:
            check_content(response_headers, body, accept, target.url)
        return status, response_headers, body

    def _send(self, target, deadline, timeout, pinned, headers, method, content, truncate_at, accept=None):
        try:
            transport = DeadlineTransport(deadline)
            with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, transport=transport) as client:
                request = client.build_request(
                    method,
                    pinned,
                    headers=headers,
                    content=content,
                    extensions={"sni_hostname": ascii_name(target.host), "trace": _note_sent},
                )
                response = client.send(request, stream=True)
                try:
                    self._check_headers(response)
                    if accept is not None and 200 <= response.status_code < 300:
                        declared = response.headers.get("content-type", "").split(";")[0].strip().lower()
                        if declared not in accept:
                            raise UnexpectedType(
                                f"{target.url} is {declared or 'without content type'}, expected one of "
                                f"{sorted(accept)}",
                                content_type=declared,
                                url=target.url,
                            )
                    body = self._read_body(response, deadline, target.url, truncate_at)
                    status, response_headers = response.status_code, response.headers
                finally:
                    response.close()
        except httpx.TimeoutException as exc:
            if time.monotonic() >= deadline:
                raise FetchTimeout(
                    f"deadline of {self.policy.total_seconds:g} s passed fetching {target.url}"
                ) from None
            raise FetchTimeout(f"{type(exc).__name__} fetching {target.url}") from None
        except httpx.RemoteProtocolError as exc:
            raise ResponseRefused(f"malformed response from {target.url}: {exc}") from None
        except httpx.InvalidURL as exc:  # a URL httpx cannot send, whatever url_problem let through
            raise FetchRefused(f"URL {target.url[:200]!r} cannot be sent: {exc}") from None
        except httpx.TransportError as exc:
            raise FetchFailed(f"{type(exc).__name__} fetching {target.url}: {exc}") from None
        return status, response_headers, body

    def _check_headers(self, response: httpx.Response) -> None:
        size = sum(len(k) + len(v) + 4 for k, v in response.headers.raw)
        if size > self.policy.max_header_bytes:
            raise ResponseRefused(f"headers of {size} bytes exceed the limit of {self.policy.max_header_bytes}")

    def _read_body(self, response: httpx.Response, deadline: float, url: str, truncate_at: int | None) -> bytes:
        """Read and decode the body ourselves, never inflating more than the limit allows.

        httpx's own decoder inflates each received chunk whole: one 50 KiB chunk of a gzip bomb
        became 130 MB in memory in a test. Here zlib may produce at most what is left of the limit.
        """
        limit = truncate_at or self.policy.max_body_bytes
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("", "identity"):
            decoder = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header, detected
        else:
            raise ResponseRefused(f"{url} uses content encoding {encoding!r}; only gzip and deflate are accepted")
        chunks, size = [], 0
        try:
            for raw in response.iter_raw():  # as received: the deadline is checked per arrival
                pending = raw
                while pending:
                    if decoder is None:
                        data, pending = pending, b""
                    else:
                        data = decoder.decompress(pending, limit - size + 1)
                        pending = decoder.unconsumed_tail
                    size += len(data)
                    if size > limit:
                        if truncate_at:
                            chunks.append(data[: len(data) - (size - limit)])
                            return b"".join(chunks)
                        raise ResponseRefused(f"body of {url} exceeds {limit} bytes (decoded)")
                    chunks.append(data)
                if time.monotonic() > deadline:
                    raise FetchTimeout(f"deadline of {self.policy.total_seconds:g} s passed while reading {url}")
            if decoder is not None:
                tail = decoder.flush()
                if size + len(tail) > limit:
                    raise ResponseRefused(f"body of {url} exceeds {limit} bytes (decoded)")
                chunks.append(tail)
        except zlib.error as exc:
            raise ResponseRefused(f"undecodable {encoding} body from {url}: {exc}") from None
        return b"".join(chunks)


def notification_client(total_seconds: float) -> SafeClient:
    """The client for webhooks and notifications: any port, the address guard with the operators'
    allow-list of in-house receivers (``LEITSTAND_NOTIFY_ALLOWED_TARGETS``: an Alertmanager, the PHP
    core on the private network)."""
    return SafeClient(
        FetchPolicy(allowed_ports=frozenset(range(1, 65536)), total_seconds=total_seconds, max_body_bytes=2**20),
        allowed_targets=options.current().notify_allowed_targets,
    )


def destination_problem(url: str) -> str | None:
    """Why a webhook or notification must not be sent to ``url`` (a special-purpose address not
    allow-listed, user information, another scheme, a host that does not resolve), or None."""
    try:
        notification_client(1.0).check(url)
    except (FetchRefused, FetchFailed) as refused:
        return str(refused)
    return None


def destination_refusal(url: str) -> str | None:
    """``destination_problem`` as people who typed the URL read it: with where an exception is made."""
    problem = destination_problem(url)
    if problem is None:
        return None
    return (
        f"notifications may not go there: {problem} (an in-house receiver is allow-listed in "
        "LEITSTAND_NOTIFY_ALLOWED_TARGETS by whoever deploys Leitstand)"
    )


def check_content(headers: httpx.Headers, body: bytes, accept: frozenset[str], url: str) -> None:
    """Refuse (``ResponseRefused``) a body whose declared type is not accepted or whose bytes lie."""
    declared = headers.get("content-type", "").split(";")[0].strip().lower()
    if declared not in accept:
        raise ResponseRefused(f"{url} is {declared or 'without content type'}, expected one of {sorted(accept)}")
    signatures = MAGIC.get(declared)
    if signatures and not any(body.startswith(s) for s in signatures):
        raise ResponseRefused(f"{url} claims {declared} but its bytes do not match")
    if declared == "image/webp" and body[8:12] != b"WEBP":
        raise ResponseRefused(f"{url} claims image/webp but its bytes do not match")
