"""Retry policy: exponential backoff with a cap and full jitter, and a finite budget."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """``delay(n)`` for the n-th failed attempt is uniform in [0, min(cap, base · 2^(n-1))].

    Full jitter (rather than a fixed exponential delay) spreads retries of jobs that failed together,
    so a recovering third party is not hit by a synchronized storm.
    """

    base_seconds: float = 5.0
    cap_seconds: float = 3600.0
    max_attempts: int = 5

    def __post_init__(self) -> None:
        if self.base_seconds <= 0:
            raise ValueError(f"base_seconds must be positive, got {self.base_seconds}")
        if self.cap_seconds < self.base_seconds:
            raise ValueError(f"cap_seconds ({self.cap_seconds}) must be at least base_seconds ({self.base_seconds})")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def ceiling(self, attempt: int) -> float:
        """The largest delay after the ``attempt``-th attempt failed (attempts count from 1)."""
        if attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt}")
        # Past 2^60 the cap has long been reached; avoid building huge floats.
        return min(self.cap_seconds, self.base_seconds * 2 ** min(attempt - 1, 60))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(0.0, self.ceiling(attempt))

    def sql_params(self) -> dict[str, float]:
        """The numbers of the same full-jitter delay for the set-based statements of ``jobs/queries.sql``
        (the reaper, the rescue of a dead worker's jobs): ``base`` and ``cap`` in seconds."""
        return {"base": float(self.base_seconds), "cap": float(self.cap_seconds)}


# Jobs of types that are no longer registered still get their leases released (reaper, supervisor).
FALLBACK_POLICY = RetryPolicy(base_seconds=30, cap_seconds=3600)
