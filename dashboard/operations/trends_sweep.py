"""The ``trend-rollups`` sweep, every 15 s (so each minute is recorded once, soon after it ends): the
last complete minute's figures per job type for the console's charts; rows older than
``LEITSTAND_ROLLUP_DAYS`` are dropped (``dashboard/operations/trends.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import options as console_options
from dashboard.operations.trends import rollups_record
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class TrendsConfig:
    keep_days: float
    every_seconds: float = 15.0

    def __post_init__(self) -> None:
        require_number(self.keep_days, "LEITSTAND_ROLLUP_DAYS", minimum=1)
        require_number(self.every_seconds, "the trend-rollups sweep's interval", minimum=1)

    @classmethod
    def from_options(cls, console: console_options.ConsoleOptions) -> TrendsConfig:
        return cls(keep_days=console.rollup_days)


def run_once(config: TrendsConfig) -> int:
    """Record the last complete minute (once) and drop old rows; how many rows were written."""
    return rollups_record(keep_days=config.keep_days)


def register() -> None:
    register_unit("trend-rollups", run_once, TrendsConfig.from_options(console_options.current()), stage=Stage.OBSERVE)
