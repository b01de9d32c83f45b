"""The ``console-snapshot`` sweep, every ``LEITSTAND_CONSOLE_SNAPSHOT_SECONDS``: the home page's
counts, computed once for every viewer and stored (``dashboard/operations/snapshot.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import options as console_options
from dashboard.operations.snapshot import snapshot_refresh
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class SnapshotConfig:
    every_seconds: float

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "LEITSTAND_CONSOLE_SNAPSHOT_SECONDS", minimum=0.5)

    @classmethod
    def from_options(cls, console: console_options.ConsoleOptions) -> SnapshotConfig:
        return cls(every_seconds=console.snapshot_seconds)


def run_once(config: SnapshotConfig) -> dict:
    """Compute and store the snapshot; its figures."""
    return snapshot_refresh()


def register() -> None:
    register_unit(
        "console-snapshot", run_once, SnapshotConfig.from_options(console_options.current()), stage=Stage.OBSERVE
    )
