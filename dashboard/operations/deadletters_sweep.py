"""The ``dead-letters`` sweep, every ``LEITSTAND_CONSOLE_DEADLETTERS_SECONDS``: every dead job grouped
by type, error class and step for the dead-letter page; a reviewed group with newer dead jobs is
reopened (``dashboard/operations/deadletters.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import options as console_options
from dashboard.operations.deadletters import dead_letters_refresh
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class DeadLettersConfig:
    every_seconds: float

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "LEITSTAND_CONSOLE_DEADLETTERS_SECONDS", minimum=1)

    @classmethod
    def from_options(cls, console: console_options.ConsoleOptions) -> DeadLettersConfig:
        return cls(every_seconds=console.deadletters_seconds)


def run_once(config: DeadLettersConfig) -> dict[str, int]:
    """Regroup the dead jobs; how many groups there are, how many reviews were reopened."""
    return dead_letters_refresh()


def register() -> None:
    register_unit(
        "dead-letters", run_once, DeadLettersConfig.from_options(console_options.current()), stage=Stage.OBSERVE
    )
