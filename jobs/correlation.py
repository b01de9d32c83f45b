"""The correlation ID of the work in hand, for log lines: set by the API for a request and by the
worker runtime for a job's handler; ``CorrelationFilter`` puts it on every log record
(``%(correlation_id)s`` in the log format; ``-`` outside any request or job)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_current: ContextVar[str] = ContextVar("correlation_id", default="-")


@contextmanager
def correlation(correlation_id: str) -> Iterator[None]:
    token = _current.set(correlation_id or "-")
    try:
        yield
    finally:
        _current.reset(token)


def current() -> str:
    return _current.get()


class CorrelationFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "correlation_id"):  # a job's own logger adapter sets it already
            record.correlation_id = _current.get()
        return True
