"""The path check: each ended attempt's step events are compared with its type's declared paths
(``jobs/pathspec.py``), and its run time with its type's and its steps' usual range.

``attempts_check`` runs in the control process every round: it takes up to ``limit`` ended,
unchecked attempts (a partial index holds exactly those), reads their step events and exits, and
writes on each attempt its path signature, whether it conforms, what diverged, its duration and
whether it was far slower than usual (above p99 × ``slow_factor`` of its type's recent attempts, or a
step above p99 × ``slow_factor`` of that step's recent runs, once ``min_samples`` runs are known).
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from django.db import connection, transaction

from jobs import options
from jobs.models import Attempt
from jobs.pathspec import STEP_MARKS, Observed, PathSpec
from jobs.sql import queries

logger = logging.getLogger(__name__)

# Attempt outcome → the exit of the pattern language; None: not judged (the attempt was interrupted).
_EXITS = {
    Attempt.Outcome.COMPLETED: "done",
    Attempt.Outcome.SKIPPED: "skipped",
    Attempt.Outcome.RECHECK_PLANNED: "recheck",
    Attempt.Outcome.UNCLEAR: "review",
    Attempt.Outcome.FAILED: "failed",
    Attempt.Outcome.DEAD: "failed",
}
# Attempts whose handler ran to an end of its own without failing: their run times make the p99.
RAN_TO_AN_END = (
    Attempt.Outcome.COMPLETED,
    Attempt.Outcome.SKIPPED,
    Attempt.Outcome.RECHECK_PLANNED,
    Attempt.Outcome.UNCLEAR,
)


@dataclass(frozen=True)
class Percentile:
    p99_ms: float
    samples: int


class TimingBaseline:
    """p99 run times per type and per (type, step) over the recent past, refreshed every
    ``refresh_seconds`` (one aggregate query over the newest attempts and step events)."""

    def __init__(self, refresh_seconds: float = 60.0, window: int = 50_000) -> None:
        self.refresh_seconds, self.window = refresh_seconds, window
        self.types: dict[str, Percentile] = {}
        self.steps: dict[tuple[str, str], Percentile] = {}
        self._loaded_at = float("-inf")

    def refresh_if_due(self) -> None:
        if time.monotonic() - self._loaded_at < self.refresh_seconds:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                queries.attempt_run_time_p99_by_type, {"window": self.window, "outcomes": list(RAN_TO_AN_END)}
            )
            self.types = {t: Percentile(p99, n) for t, p99, n in cursor.fetchall()}
            cursor.execute(queries.step_run_time_p99_by_type_and_step, {"window": self.window})
            self.steps = {(t, step): Percentile(p99, n) for t, step, p99, n in cursor.fetchall()}
        self._loaded_at = time.monotonic()

    def slow(self, job_type: str, duration_ms: float | None, steps: list[tuple[str, str, float]]) -> str:
        """Why this run was far slower than usual, or ''."""
        engine = options.current()
        factor, minimum = engine.path_slow_factor, engine.path_min_samples
        usual = self.types.get(job_type)
        if duration_ms is not None and usual and usual.samples >= minimum and duration_ms > usual.p99_ms * factor:
            return (
                f"ran {duration_ms / 1000:.2f} s; {job_type}'s p99 is {usual.p99_ms / 1000:.2f} s "
                f"(× {factor:g} = {usual.p99_ms * factor / 1000:.2f} s, {usual.samples} runs)"
            )
        for step, _outcome, step_ms in steps:
            usual = self.steps.get((job_type, step))
            if usual and usual.samples >= minimum and step_ms > usual.p99_ms * factor:
                return (
                    f"step {step} took {step_ms / 1000:.2f} s; its p99 is {usual.p99_ms / 1000:.2f} s "
                    f"(× {factor:g}, {usual.samples} runs)"
                )
        return ""


_baseline = TimingBaseline()


def observed_path(steps: list[tuple[str, str, float]], outcome: str) -> Observed | None:
    exit = _EXITS.get(outcome)
    if exit is None:
        return None
    return Observed(tuple((name, result) for name, result, _ in steps), exit)


def attempts_check(specs: Mapping[str, PathSpec], *, limit: int = 1000) -> list[tuple]:
    """Check up to ``limit`` ended attempts; returns (job ID, type, exit) of each one checked (exit
    None: not judged)."""
    _baseline.refresh_if_due()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(queries.attempts_unchecked_lock_skip_locked, {"limit": limit})
        attempts = cursor.fetchall()
        if not attempts:
            return []
        keys = [{"job_id": str(job_id), "lease_version": version} for _, job_id, version, *_ in attempts]
        cursor.execute(queries.step_events_of_attempts, {"attempts": json.dumps(keys)})
        steps: dict[tuple, list[tuple[str, str, float]]] = defaultdict(list)
        for job_id, version, step, outcome, duration in cursor.fetchall():
            steps[(job_id, version)].append((step, outcome, duration))
        rows, checked = [], []
        for attempt_id, job_id, version, outcome, job_type, duration_ms in attempts:
            ran = steps.get((job_id, version), [])
            observed = observed_path(ran, outcome)
            checked.append((job_id, job_type, observed.exit if observed else None))
            spec = specs.get(job_type)
            if observed is None:
                signature = " > ".join(n + STEP_MARKS.get(o, "") for n, o, _ in ran) or "(no steps)"
                row = {"signature": f"{signature} -> {outcome}", "conforms": None, "divergence": "", "kind": ""}
            elif spec is None:
                row = {
                    "signature": observed.signature,
                    "conforms": None,
                    "divergence": f"job type {job_type} is not registered here",
                    "kind": "",
                }
            else:
                try:
                    verdict = spec.judge(observed)
                except Exception as failed:  # one attempt that cannot be judged is recorded so; the rest are
                    logger.exception("the path of job %s attempt %s could not be judged", job_id, version)
                    row = {
                        "signature": observed.signature,
                        "conforms": None,
                        "divergence": f"not judged: {type(failed).__name__}: {failed}",
                        "kind": "",
                    }
                else:
                    row = {
                        "signature": observed.signature,
                        "conforms": verdict.conforms,
                        "divergence": verdict.divergence,
                        "kind": verdict.kind,
                    }
            duration = float(duration_ms) if duration_ms is not None else None
            rows.append(
                {
                    **row,
                    "id": attempt_id,
                    "signature": row["signature"][:500],
                    "divergence": row["divergence"][:500],
                    "duration_ms": duration,
                    "slow_reason": _baseline.slow(job_type, duration, ran)[:300],
                }
            )
        cursor.execute(queries.attempts_path_record, {"results": json.dumps(rows)})
    return checked
