"""The three classes of failure, and how an exception is routed to one of them.

transient → retry with backoff while the budget lasts; permanent → dead-letter at once (retrying
cannot help: bad input, a 404, an unsupported image); unclear → human review (the handler ran
fine but could not decide the business question).
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNCLEAR = "unclear"


class JobError(Exception):
    """Base of the errors a handler raises to say how its failure should be treated."""

    kind: ErrorKind = ErrorKind.TRANSIENT


class TransientError(JobError):
    """Worth retrying later: a timeout, a 503, a connection reset, a rate limit."""

    kind = ErrorKind.TRANSIENT


class PermanentError(JobError):
    """Retrying cannot help: invalid payload, 404/410, an unsupported or corrupt image."""

    kind = ErrorKind.PERMANENT


class UnclearError(JobError):
    """The work ran, but the business question is undecided: a person must look."""

    kind = ErrorKind.UNCLEAR


class Deferred(Exception):
    """Not now, and not the job's fault (e.g. the host it must contact is busy or resting): the job
    is handed back, due again after ``retry_after`` seconds, without using its retry budget."""

    # The error class a job deferred past its useful life ends with (None: the deferral's own class).
    past_life_class: str | None = "DeferredPastUsefulLife"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# Exceptions that are certainly not worth a retry, whoever raises them: the input itself is wrong.
_PERMANENT_BUILTINS = (ValueError, TypeError, KeyError, LookupError, UnicodeError)


def classify(exc: BaseException) -> ErrorKind:
    """Route an exception: our own classes say what they are; known input errors are permanent;
    anything else (timeouts, connection errors, the unexpected) is transient, bounded by the budget.
    """
    if isinstance(exc, JobError):
        return exc.kind
    if isinstance(exc, _PERMANENT_BUILTINS):
        return ErrorKind.PERMANENT
    return ErrorKind.TRANSIENT


def error_class_name(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
