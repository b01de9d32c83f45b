"""A correlation ID as it can travel: in HTTP headers, webhooks and log lines. (Binding the ID of the
work in hand to log lines is ``jobs.logs``'s.)"""

from __future__ import annotations

from urllib.parse import quote

# Printable ASCII stays as it is (a '%' too: a value encoded before is not encoded twice).
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F))


def header_safe(text: str) -> str:
    """``text`` as it can travel in an HTTP header, as every correlation ID is stored: printable ASCII
    as it is, any other character percent-encoded as UTF-8 (RFC 3986). The API refuses other IDs
    with a 422; the engine stores its producers' IDs so, and this keeps an older job's non-ASCII ID from
    failing every webhook of its tree, and every child it spawns. At most 255 characters."""
    return quote(text, safe=_HEADER_SAFE, errors="backslashreplace")[:255]
