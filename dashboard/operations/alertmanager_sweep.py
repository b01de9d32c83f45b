"""The ``alertmanager`` sweep, every ``LEITSTAND_ALERTMANAGER_REPOST_SECONDS``: every open, not
silenced alert is posted again to its route's Alertmanager before the ``endsAt`` of its last post
(Alertmanager resolves an alert that is not re-posted; ``dashboard/operations/notify.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import options as console_options
from dashboard.operations.notify import alertmanager_repost
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class AlertmanagerConfig:
    every_seconds: float = 60.0

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "LEITSTAND_ALERTMANAGER_REPOST_SECONDS", minimum=1)

    @classmethod
    def from_options(cls, console: console_options.ConsoleOptions) -> AlertmanagerConfig:
        return cls(every_seconds=console.alerting.alertmanager_repost_seconds)


def run_once(config: AlertmanagerConfig) -> int:
    """Post the open alerts again; to how many routes."""
    return alertmanager_repost(every_seconds=config.every_seconds)


def register() -> None:
    register_unit(
        "alertmanager", run_once, AlertmanagerConfig.from_options(console_options.current()), stage=Stage.OBSERVE
    )
