"""How a moment and a length of time read for people, in the console's pages and in the messages
alerts and rules store."""

from datetime import datetime

from django.utils import timezone


def clock(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%H:%M:%S")


def ago(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"
