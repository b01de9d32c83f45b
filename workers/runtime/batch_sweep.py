"""The ``batches`` sweep, every round, before the webhooks (its ``batch.finished`` events reach the
outbox in the same round): running batches whose every member has ended are finalized, at most
``limit`` a round (``jobs/batches.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.batches import batches_finalize
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class BatchConfig:
    limit: int = 100
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require_number(self.limit, "the batches sweep's limit", minimum=1, whole=True)


def run_once(config: BatchConfig) -> int:
    """Finalize the batches that have ended; how many."""
    return batches_finalize(limit=config.limit)


def register() -> None:
    register_unit("batches", run_once, BatchConfig(), stage=Stage.PLAN)
