"""Hooks the runtime offers to the apps above it, so a handler can announce a business event without
importing whoever acts on it.

``match_reported`` is sent by a handler inside the transaction that records a reported copy, with
``job`` (the ``jobs.Job``), ``finding`` and ``content_hash``. Receivers act in that transaction (the
rechecks app plans the copy's follow-up checks there) and return a reference to what they created
(``"recheck_plan:12"``); an exception rolls the record back with them, and the job's attempt fails.
"""

from django.dispatch import Signal

match_reported = Signal()


def match_report(*, sender: str, job, finding, content_hash: str) -> list[str]:
    """Send ``match_reported``; returns the references the receivers answered with."""
    answers = match_reported.send(sender=sender, job=job, finding=finding, content_hash=content_hash)
    return [reference for _, reference in answers if reference]
