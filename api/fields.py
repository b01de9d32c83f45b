"""Field types and conversions every resource of the API shares."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Annotated

from pydantic import AfterValidator

from jobs.services import JobInputError


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


# Every text the API accepts: PostgreSQL text cannot hold NUL, so it is refused here with a 422.
Text = Annotated[str, AfterValidator(_without_nul)]


def utc(moment: datetime | None, field: str) -> datetime | None:
    """A datetime in UTC (without an offset: taken as UTC), or 422 naming the field when it cannot be."""
    if moment is None:
        return None
    try:
        return moment.replace(tzinfo=dt_timezone.utc) if moment.tzinfo is None else moment.astimezone(dt_timezone.utc)
    except (OverflowError, ValueError):
        raise JobInputError(field, f"{moment.isoformat()} is outside the representable range in UTC") from None
