"""The ``bulk-actions`` sweep, every round: each running bulk operation (cancel, retry, requeue over a
filter, started in the console) takes its next ``batch`` of jobs, so a million-job operation never
holds one long transaction (``dashboard/operations/bulk.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.operations import bulk
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class BulkSweepConfig:
    batch: int = bulk.BATCH
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require_number(self.batch, "the bulk-actions sweep's batch", minimum=1, whole=True)


def run_once(config: BulkSweepConfig) -> int:
    """One batch of every running operation; how many jobs changed."""
    return bulk.bulk_step(batch=config.batch)


def register() -> None:
    register_unit("bulk-actions", run_once, BulkSweepConfig(), stage=Stage.PLAN)
