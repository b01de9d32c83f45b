"""The ``review-queue`` sweep, every round: jobs the analysis could not decide (``unclear``) become
review cases (``ready_for_review``), oldest first, at most ``limit`` a round."""

from __future__ import annotations

from dataclasses import dataclass

from jobs import leases
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class ReviewQueueConfig:
    limit: int = 1000
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require_number(self.limit, "the review-queue sweep's limit", minimum=1, whole=True)


def run_once(config: ReviewQueueConfig) -> int:
    """Queue the unclear jobs for review; how many."""
    return len(leases.unclear_queue_for_review(limit=config.limit))


def register() -> None:
    register_unit("review-queue", run_once, ReviewQueueConfig(), stage=Stage.ENGINE)
