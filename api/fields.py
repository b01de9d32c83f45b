"""Field types and conversions every resource of the API shares."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from jobs.services import JobInputError


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise ValueError("must not contain lone surrogates (\\ud800-\\udfff): they are no characters")
    return value


def _header_safe(value: str) -> str:
    if not (value.isascii() and value.isprintable()):
        raise ValueError("must contain printable ASCII characters only: it travels in HTTP headers (X-Correlation-ID)")
    return value


# Every text the API accepts: PostgreSQL text cannot hold NUL or a lone surrogate, so they are refused
# here with a 422.
Text = Annotated[str, AfterValidator(_without_nul)]
# A text that travels in HTTP headers (correlation IDs): printable ASCII, refused with a 422 otherwise.
HeaderText = Annotated[str, AfterValidator(_header_safe)]
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time_text(value: object) -> object:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _DATE_TIME.match(value):
        # pydantic would take 1765000000 or "1765000000" for a Unix time: the schema says date-time.
        raise ValueError("must be a date-time as RFC 3339 writes it (2026-12-07T09:30:00Z), not a number or a date")
    return value


# A moment a client sends: what the schema declares (``format: date-time``) and nothing else.
Moment = Annotated[datetime, BeforeValidator(_date_time_text)]
# How far in the past a client's due time may lie (the clocks' skew); earlier is refused.
DUE_AT_SKEW = timedelta(minutes=5)


def due_at_check(moment: datetime | None, field: str = "due_at") -> datetime | None:
    """A client's due time, not before now: a due time in 1900 would put the job ahead of every job
    waiting in its lane. (Checked against this server's clock with ``DUE_AT_SKEW`` to spare: a
    moment a little in the past is merely due at once, and the check costs no round trip.)"""
    if moment is not None and moment < datetime.now(dt_timezone.utc) - DUE_AT_SKEW:
        raise JobInputError(field, f"{moment.isoformat()} lies in the past; a job is due now or later")
    return moment


def utc(moment: datetime | None, field: str) -> datetime | None:
    """A datetime in UTC (without an offset: taken as UTC), or 422 naming the field when it cannot be."""
    if moment is None:
        return None
    try:
        return moment.replace(tzinfo=dt_timezone.utc) if moment.tzinfo is None else moment.astimezone(dt_timezone.utc)
    except (OverflowError, ValueError):
        raise JobInputError(field, f"{moment.isoformat()} is outside the representable range in UTC") from None
