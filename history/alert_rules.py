"""The history's alert rule, registered with the alerts (``history/apps.py``): archive files that
cannot be written, so nothing is purged."""

from __future__ import annotations

from datetime import datetime

from alerts.alert_rules import Firing, Rule
from history.models import ArchiveFile


def _archive_failing(now: datetime, memory: dict) -> list[Firing]:
    """Archive files that could not be written: purging has stopped until they are (retention)."""
    failed = list(ArchiveFile.objects.filter(state=ArchiveFile.State.FAILED).order_by("created_at")[:5])
    if not failed:
        return []
    first = failed[0]
    return [
        Firing(
            "archive",
            (now - first.created_at).total_seconds(),
            0,
            f"{len(failed)} archive file{'s' if len(failed) != 1 else ''} not written, purging stopped; "
            f"{first.path}: {first.error}",
        )
    ]


ARCHIVE_FAILING = Rule(
    "archive_failing", "The archive cannot be written, so history is not purged", _archive_failing, severity="page"
)
