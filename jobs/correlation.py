"""The correlation ID of the work in hand, for log lines: set by the API for a request and by the
worker runtime for a job's handler; ``CorrelationFilter`` puts it on every log record
(``%(correlation_id)s`` in the log format; ``-`` outside any request or job)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import quote

# Printable ASCII stays as it is (a '%' too: a value encoded before is not encoded twice).
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F))

_current: ContextVar[str] = ContextVar("correlation_id", default="-")


@contextmanager
def correlation(correlation_id: str) -> Iterator[None]:
    token = _current.set(correlation_id or "-")
    try:
        yield
    finally:
        _current.reset(token)


def header_safe(text: str) -> str:
    """``text`` as it can travel in an HTTP header, as every correlation ID is stored: printable ASCII
    as it is, any other character percent-encoded as UTF-8 (RFC 3986). The API refuses other IDs
    with a 422; the engine stores its producers' IDs so, and this keeps an older job's non-ASCII ID from
    failing every webhook of its tree, and every child it spawns. At most 255 characters."""
    return quote(text, safe=_HEADER_SAFE, errors="backslashreplace")[:255]


def current() -> str:
    return _current.get()


class CorrelationFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "correlation_id"):  # a job's own logger adapter sets it already
            record.correlation_id = _current.get()
        return True
