"""The batch sizing rule: how many jobs a batch should hold to finish in a target time.

    recommended size = live workers × measured throughput per worker per minute × target minutes

Live workers: the pool's worker processes with a heartbeat in the last ``LIVE_WITHIN_SECONDS``.
Throughput: the pool's attempts that ended with a handler outcome (completed, recheck, review,
failed, dead) in the last ``window`` minutes, per live worker per minute — what the pool did, so a
pool that idled part of the window understates what it can do; the busy share says how much, and
the rate at full load (attempts per minute of handler time) is shown beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from jobs import reads
from jobs.models import Attempt, database_now
from jobs.paths import RAN_TO_AN_END
from jobs.services import JobInputError
from workers.runtime import options
from workers.runtime.selectors import LIVE_WITHIN_SECONDS, pool_consumers

# Attempts looked at, at most (the newest; the window is minutes, so this bounds the scan).
RECENT_ATTEMPTS = 200_000


@dataclass(frozen=True)
class Sizing:
    pool: str
    target_minutes: float
    window_minutes: float
    live_workers: int
    attempts: int  # ended in the window
    busy_minutes: float  # handler time of those attempts
    per_worker_per_minute: float
    at_full_load_per_worker_per_minute: float | None
    recommended: int

    @property
    def busy_share(self) -> float:
        capacity = self.live_workers * self.window_minutes
        return self.busy_minutes / capacity if capacity else 0.0

    def explain(self) -> list[str]:
        lines = [
            f"live workers: {self.live_workers} (pool {self.pool}'s worker processes with a heartbeat in the last "
            f"{LIVE_WITHIN_SECONDS} s, from the worker registry)",
            f"measured throughput per worker per minute: {self.per_worker_per_minute:.2f} ({self.attempts} attempts ended "
            f"in the last {self.window_minutes:g} min ÷ {self.live_workers} workers ÷ {self.window_minutes:g} min, "
            f"from the attempts table)",
            f"target: {self.target_minutes:g} min",
            f"recommended batch size: {self.live_workers} × {self.per_worker_per_minute:.2f} × {self.target_minutes:g} "
            f"= {self.recommended}",
        ]
        if self.live_workers and self.attempts:
            lines.append(
                f"the workers were busy {self.busy_share:.0%} of the window"
                + (
                    f"; at full load a worker ends {self.at_full_load_per_worker_per_minute:.2f} a minute, "
                    f"which would allow {math.floor(self.live_workers * self.at_full_load_per_worker_per_minute * self.target_minutes)}"
                    if self.at_full_load_per_worker_per_minute and self.busy_share < 0.8
                    else ""
                )
            )
        if not self.live_workers:
            lines.append("no live workers: start the pool (manage.py runpool " + self.pool + ") before sizing a batch")
        elif not self.attempts:
            lines.append("no attempts ended in the window: run some jobs first (the rule measures, it does not guess)")
        return lines


def batch_size_recommendation(*, pool: str, target_minutes: float, window_minutes: float = 15) -> Sizing:
    if refusal := options.current().pool_refusal(pool):
        raise JobInputError("pool", refusal)
    (sizing,) = batch_size_recommendations(pools=[pool], target_minutes=target_minutes, window_minutes=window_minutes)
    return sizing


def batch_size_recommendations(*, pools: list[str], target_minutes: float, window_minutes: float = 15) -> list[Sizing]:
    """The rule for each of ``pools``, measured in one pass over the recent attempts (the batches page)."""
    if not isinstance(target_minutes, (int, float)) or not 0 < target_minutes <= 7 * 24 * 60:
        raise JobInputError("target_minutes", "must be a number of minutes above 0, at most a week")
    if not 1 <= window_minutes <= 24 * 60:
        raise JobInputError("window_minutes", "must be from 1 to 1440")
    consumers = pool_consumers()
    since = database_now() - timedelta(minutes=window_minutes)
    ended = {
        pool: (attempts, float(seconds))
        for pool, attempts, seconds in reads.rows(
            "pool_busy_time",
            above=reads.row("attempt_newest_id")[0] - RECENT_ATTEMPTS,
            pools=pools,
            since=since,
            outcomes=[*RAN_TO_AN_END, Attempt.Outcome.FAILED, Attempt.Outcome.DEAD],
        )
    }
    sizings = []
    for pool in pools:
        workers = consumers.get(pool, 0)
        attempts, busy_seconds = ended.get(pool, (0, 0.0))
        busy_minutes = busy_seconds / 60
        per_worker = attempts / workers / window_minutes if workers else 0.0
        sizings.append(
            Sizing(
                pool=pool,
                target_minutes=target_minutes,
                window_minutes=window_minutes,
                live_workers=workers,
                attempts=attempts,
                busy_minutes=busy_minutes,
                per_worker_per_minute=per_worker,
                at_full_load_per_worker_per_minute=attempts / busy_minutes if busy_minutes > 0 else None,
                recommended=math.floor(workers * per_worker * target_minutes),
            )
        )
    return sizings
