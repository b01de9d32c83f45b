"""The ``retries`` sweep, every round: failed jobs whose next attempt has come are planned again, due
at that time (``jobs_plan_if_retry_due``), at most ``limit`` a round; the rest follow next round."""

from __future__ import annotations

from dataclasses import dataclass

from jobs import leases
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class RetryConfig:
    limit: int = 1000
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require_number(self.limit, "the retries sweep's limit", minimum=1, whole=True)


def run_once(config: RetryConfig) -> int:
    """Plan the failed jobs whose retry is due; how many."""
    return len(leases.retries_promote_due(limit=config.limit))


def register() -> None:
    register_unit("retries", run_once, RetryConfig(), stage=Stage.ENGINE)
