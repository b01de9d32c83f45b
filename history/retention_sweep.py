"""The ``retention`` sweep, every ``LEITSTAND_RETENTION_EVERY_SECONDS`` while
``LEITSTAND_RETENTION_ENABLED``: ended jobs past their retention are archived (verified) and then
purged, the audit log a day at a time, old partitions dropped and the other records trimmed, for at
most ``LEITSTAND_RETENTION_SECONDS_PER_ROUND`` (``history/retention.py``). It commits as
it goes (archive before purge) and fences each step itself."""

from __future__ import annotations

from dataclasses import dataclass

from history import options as history_options
from history.retention import RetentionReport, retention_sweep
from workers.runtime.sweeps import Stage, register_unit, require, require_number


@dataclass(frozen=True)
class RetentionConfig:
    enabled: bool
    seconds_per_round: float
    every_seconds: float

    def __post_init__(self) -> None:
        require(
            isinstance(self.enabled, bool),
            "LEITSTAND_RETENTION_ENABLED",
            f"must be true or false, not {self.enabled!r}",
        )
        require_number(self.seconds_per_round, "LEITSTAND_RETENTION_SECONDS_PER_ROUND", minimum=0.1)
        require_number(self.every_seconds, "LEITSTAND_RETENTION_EVERY_SECONDS", minimum=0)

    @classmethod
    def from_options(cls, retention: history_options.RetentionOptions) -> RetentionConfig:
        return cls(
            enabled=retention.enabled,
            seconds_per_round=retention.seconds_per_round,
            every_seconds=retention.every_seconds,
        )


def run_once(config: RetentionConfig) -> RetentionReport:
    """One round of retention (nothing while disabled); what it archived, purged and trimmed."""
    if not config.enabled:
        return RetentionReport()
    return retention_sweep(seconds_per_round=config.seconds_per_round)


def register() -> None:
    register_unit(
        "retention",
        run_once,
        RetentionConfig.from_options(history_options.current()),
        stage=Stage.OBSERVE,
        fenced=False,
    )
