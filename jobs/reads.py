"""The reads of the engine's tables that the layers above need in SQL of their own, as named
statements of ``jobs/reads.sql`` with the job states and outcomes rendered from their declarations
(jobs/models.py). ``rows("open_counts", now=now)`` runs one and returns its rows."""

from __future__ import annotations

from pathlib import Path

from django.db import connection

from jobs.models import LEASED_STATES, TERMINAL_STATES, Attempt, State, StepEvent
from jobs.sql import Queries


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


CONSTANTS = {
    **{f"state.{state.name}": _literal(state) for state in State},
    **{f"outcome.{outcome.name}": _literal(outcome) for outcome in Attempt.Outcome},
    **{f"step_outcome.{outcome.name}": _literal(outcome) for outcome in StepEvent.Outcome},
    # In the declaration's order, as the partial indexes were built (job_open_idx, job_leased_idx).
    "states.TERMINAL": "(" + ", ".join(_literal(state) for state in TERMINAL_STATES) + ")",
    "states.LEASED": "(" + ", ".join(_literal(state) for state in LEASED_STATES) + ")",
}
SOURCE = Path(__file__).with_name("reads.sql")
reads = Queries.read(SOURCE, constants=CONSTANTS)


def composed(name: str) -> str:
    """A read's SQL, for a layer above that puts it into a statement of its own as a subquery."""
    return getattr(reads, name)


def rows(name: str, **params) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(getattr(reads, name), params)
        return cursor.fetchall()


def row(name: str, **params) -> tuple:
    """The one row of a statement that returns exactly one."""
    (only,) = rows(name, **params)
    return only
