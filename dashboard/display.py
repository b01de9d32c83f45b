"""Small display helpers shared by the console's pages."""

import base64
import re
from datetime import datetime

from django.utils import timezone

from jobs.display import ago, clock
from workers.pipeline.http import MAGIC


def data_uri(data: bytes | None) -> str:
    """An image as a ``data:`` URI (allowed by the console's CSP), typed by its magic bytes."""
    if not data:
        return ""
    data = bytes(data)
    mime = next((t for t, signatures in MAGIC.items() if any(data.startswith(s) for s in signatures)), "image/png")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


_ID = re.compile(r"[0-9]{1,18}")
_NUMBER = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")


def as_id(value) -> int | None:
    """A record ID from a URL or a form, or None: ASCII digits only (``"²".isdigit()`` is true, and
    ``int("²")`` raises), and small enough for the database's bigint."""
    text = str(value)
    return int(text) if _ID.fullmatch(text) else None


def as_number(value) -> float | None:
    """A plain decimal number from a form (no sign, exponent, NaN or infinity), or None."""
    text = str(value).strip()
    return float(text) if _NUMBER.fullmatch(text) else None


def moment(at: datetime, now: datetime) -> str:
    """A time as people read it next to now: "14:02:10" today, "2026-12-06 14:02:10" on another day."""
    local = timezone.localtime(at)
    return clock(at) if local.date() == timezone.localtime(now).date() else f"{local:%Y-%m-%d %H:%M:%S}"


def rate(starts: int, seconds: int) -> str:
    """A rate limit as people read it: "10 starts per second", "1 start per 5 min"."""
    per = "second" if seconds == 1 else "minute" if seconds == 60 else "hour" if seconds == 3600 else ago(seconds)
    return f"{starts:,} start{'' if starts == 1 else 's'} per {per}"


def duration(milliseconds: float | None) -> str:
    """A step's or an attempt's duration as people read it: "0.9 ms", "48 ms", "1.2 s", "3 min 4 s"."""
    if milliseconds is None:
        return "—"
    if milliseconds < 10:
        return f"{milliseconds:.1f} ms"
    if milliseconds < 1000:
        return f"{milliseconds:.0f} ms"
    seconds = milliseconds / 1000
    if seconds < 90:
        return f"{seconds:.1f} s"
    return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
