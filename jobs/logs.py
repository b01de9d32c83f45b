"""What a log line says about the work in hand, and the two formats lines are written in.

Whoever starts a piece of work binds what a log pipeline needs to join its lines with a job, a
request or a trace: the worker runtime a job's ID, attempt (its lease version), type and
correlation ID while its handler runs; the API a request's correlation ID and, once its token is
checked, the client and token; the console its user; a pool process its pool for its whole life.
``ContextFilter`` puts what is bound on every record (a record's own ``extra`` wins), so any logger
in any module writes them, not only the job's own.

``LEITSTAND_LOG_FORMAT`` chooses the format (config/settings.py): ``plain``, the default, a line for
a person with the correlation ID in brackets; ``json``, one JSON object per line for a log pipeline
(python-json-logger: ``time`` in ISO 8601 UTC, ``level``, ``logger``, ``message``, ``process``, every
bound field and every ``extra``, and a traceback as ``exception``), the same in the web server, the
pools and the control process."""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

# The fields a log line may carry about its work, by the name they have in a JSON line.
FIELDS = ("correlation_id", "trace_id", "span_id", "job_id", "attempt", "job_type", "pool", "client", "token", "user")

_EMPTY: Mapping = MappingProxyType({})
_bound: ContextVar[Mapping] = ContextVar("log_context", default=_EMPTY)
# Fields of the whole process (a pool process's pool), which threads started later see too: a new
# thread starts with the context variables' defaults.
_process: dict = {}


def _kept(fields: Mapping) -> dict:
    return {name: value for name, value in fields.items() if value is not None and value != ""}


@contextmanager
def bound(**fields) -> Iterator[None]:
    """Bind ``fields`` to every log line written inside the block (by this thread or task); empty
    values bind nothing. A value may be a function of no arguments, called when a line is written
    (the console's user, read only if something is logged)."""
    token = _bound.set({**_bound.get(), **_kept(fields)})
    try:
        yield
    finally:
        _bound.reset(token)


def bind(**fields) -> None:
    """Add ``fields`` to what is bound until the enclosing ``bound`` block ends (an API request's
    client, known once its token is checked inside the request)."""
    _bound.set({**_bound.get(), **_kept(fields)})


def bind_process(**fields) -> None:
    """Bind ``fields`` to every line this process writes from now on, in every thread."""
    _process.update(_kept(fields))


class ContextFilter(logging.Filter):
    """Puts the bound fields on every record that does not carry them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        span = trace.get_current_span()
        if span.is_recording():  # a span recorded by the SDK (jobs/tracing.py): the line names it
            context = span.get_span_context()
            record.trace_id, record.span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
        for fields in (_bound.get(), _process):
            for name, value in fields.items():
                if name not in record.__dict__:
                    value = _called(value)
                    if value is not None and value != "":
                        setattr(record, name, value)
        return True


def _called(value: object) -> object:
    if not callable(value):
        return value
    try:
        return value()
    except Exception:  # a field that cannot be read never costs the log line
        return None


class JsonFormatter(_JsonFormatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, ``process``, then the
    bound fields and the record's ``extra`` (python-json-logger adds every attribute a record has
    beyond the standard ones), a traceback as ``exception``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(
            ["levelname", "name", "message", "process"],
            rename_fields={"levelname": "level", "name": "logger", "exc_info": "exception"},
            timestamp="time",
            **kwargs,
        )


def capture_uncaught() -> None:
    """Send what would bypass logging through it, so a JSON log has no line of another shape: Python's
    warnings (``py.warnings``) and an exception no code caught, in the main thread or another
    (``leitstand.uncaught``, CRITICAL, with its traceback)."""
    logging.captureWarnings(True)
    uncaught = logging.getLogger("leitstand.uncaught")

    def on_exception(kind, value, traceback) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, traceback)
            return
        uncaught.critical("uncaught exception", exc_info=(kind, value, traceback))

    def on_thread_exception(args) -> None:
        if args.exc_type is SystemExit:
            return
        uncaught.critical(
            "uncaught exception in thread %s",
            args.thread.name if args.thread else "?",
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    sys.excepthook = on_exception
    threading.excepthook = on_thread_exception


def formatter(log_format: str, plain: str) -> logging.Formatter:
    """The formatter of ``log_format`` ('plain' or 'json'; settings.LOGGING's): ``plain`` the format
    string for a person, with ``-`` where a line has no correlation ID."""
    if log_format == "json":
        return JsonFormatter()
    return logging.Formatter(plain, defaults={"correlation_id": "-"})


# --- the lines an attempt keeps ---------------------------------------------------------------

# What one attempt keeps of the lines written while its handler runs (shown beside its steps on the
# job page, exported and archived with it): warnings and errors, and as many info lines as its type
# allows (``JobType.log_info_lines``; info lines beyond it are neither kept nor counted), at most
# LINES_KEPT lines and TEXT_KEPT characters in all; a message is cut to MESSAGE_CHARS, a traceback to
# EXCEPTION_CHARS (its end: where it was raised). A warning or error that did not fit is counted.
LINES_KEPT = 50
TEXT_KEPT = 32_000
MESSAGE_CHARS = 2000
EXCEPTION_CHARS = 8000


class Kept:
    """The lines one attempt keeps (``kept``), as stored on the attempt (``stored``)."""

    __slots__ = ("lines", "dropped", "info_left", "text_left")

    def __init__(self, info_lines: int) -> None:
        self.lines: list[dict] = []
        self.dropped = 0
        self.info_left = info_lines
        self.text_left = TEXT_KEPT

    def add(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            if self.info_left <= 0:
                return
            self.info_left -= 1
        if len(self.lines) >= LINES_KEPT:
            self.dropped += 1
            return
        try:
            message = record.getMessage()
        except Exception as exc:  # a call with arguments its format does not take
            message = f"{str(record.msg)[:MESSAGE_CHARS]!r} (unformattable: {type(exc).__name__})"
        line = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message[:MESSAGE_CHARS],
        }
        if isinstance(record.exc_info, tuple) and record.exc_info[0] is not None:
            text = "".join(traceback.format_exception(*record.exc_info))
            line["exception"] = text[-EXCEPTION_CHARS:]
        size = len(line["message"]) + len(line.get("exception", ""))
        if size > self.text_left:
            self.dropped += 1
            return
        self.text_left -= size
        self.lines.append(line)

    def stored(self) -> dict | None:
        """What the attempt stores: ``{"lines": [...], "dropped": n}``, or None when nothing was kept."""
        if not self.lines and not self.dropped:
            return None
        return {"lines": list(self.lines), "dropped": self.dropped}


_keeping: ContextVar[Kept | None] = ContextVar("log_kept", default=None)


@contextmanager
def kept(info_lines: int = 0) -> Iterator[Kept]:
    """Keep the lines this thread writes inside the block (``KeepHandler`` must be installed)."""
    keeping = Kept(info_lines)
    token = _keeping.set(keeping)
    try:
        yield keeping
    finally:
        _keeping.reset(token)


class KeepHandler(logging.Handler):
    """Hands each line to the attempt keeping lines in this thread, if any. ``skip``: loggers whose
    lines the attempt shows otherwise (the runtime's own line about its outcome)."""

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        super().__init__(logging.INFO)
        self.skip = skip

    def emit(self, record: logging.LogRecord) -> None:
        keeping = _keeping.get()
        if keeping is None or record.name in self.skip:
            return
        try:
            keeping.add(record)
        except Exception:  # a record no line can be made of (a message whose str() raises): never the job's end
            keeping.dropped += 1


def keep_install(skip: frozenset[str] = frozenset()) -> None:
    """Install ``KeepHandler`` on the root logger, once per process."""
    root = logging.getLogger()
    if not any(isinstance(handler, KeepHandler) for handler in root.handlers):
        root.addHandler(KeepHandler(skip))


class Outage:
    """A loop's failures while something it needs is away (the database), logged as one outage: once
    when it begins, with its cause and traceback; then at most every ``repeat_seconds`` — doubling up
    to ``max_repeat_seconds`` — with how many rounds failed; and once when it ends. ``failed`` also
    says how long the loop should wait before its next round (doubling from ``base_seconds`` up to
    ``max_backoff_seconds``), so a loop that polls ten times a second does not while nothing answers.
    Not thread-safe: one per loop."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        base_seconds: float = 0.1,
        max_backoff_seconds: float = 5.0,
        repeat_seconds: float = 30.0,
        max_repeat_seconds: float = 600.0,
        clock=None,
    ) -> None:
        self.logger, self.what = logger, what
        self.base_seconds, self.max_backoff_seconds = base_seconds, max_backoff_seconds
        self.first_repeat, self.max_repeat = repeat_seconds, max_repeat_seconds
        self.clock = clock or time.monotonic
        self.failures = 0
        self.began = 0.0
        self.next_log = 0.0
        self.repeat = repeat_seconds

    @property
    def is_on(self) -> bool:
        return self.failures > 0

    def failed(self, error: BaseException) -> float:
        """Record one failed round; returns the seconds to wait before the next."""
        now = self.clock()
        self.failures += 1
        cause = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:300]
        if self.failures == 1:
            self.began = now
            self.next_log = now + self.repeat
            self.logger.warning(
                "%s failed: %s (an outage: logged again at most every %g s until it ends)",
                self.what,
                cause,
                self.repeat,
                exc_info=error,
            )
        elif now >= self.next_log:
            self.repeat = min(self.repeat * 2, self.max_repeat)
            self.next_log = now + self.repeat
            self.logger.warning(
                "%s still failing: %d rounds in %.0f s, the last: %s", self.what, self.failures, now - self.began, cause
            )
        return min(self.base_seconds * 2 ** min(self.failures, 16), self.max_backoff_seconds)

    def succeeded(self) -> None:
        """Record a round that worked: an outage in progress ends, and says so."""
        if self.failures:
            self.logger.warning(
                "%s works again after %d failed rounds in %.0f s", self.what, self.failures, self.clock() - self.began
            )
        self.failures = 0
        self.repeat = self.first_repeat
