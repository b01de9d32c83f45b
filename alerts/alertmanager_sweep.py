"""The ``alertmanager`` sweep, every ``LEITSTAND_ALERTMANAGER_REPOST_SECONDS``: every open, not
silenced alert is posted again to its route's Alertmanager before the ``endsAt`` of its last post
(Alertmanager resolves an alert that is not re-posted; ``alerts/notify.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from alerts import options as alert_options
from alerts.notify import alertmanager_repost
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class AlertmanagerConfig:
    every_seconds: float

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "LEITSTAND_ALERTMANAGER_REPOST_SECONDS", minimum=1)

    @classmethod
    def from_options(cls, alerting: alert_options.AlertingOptions) -> AlertmanagerConfig:
        return cls(every_seconds=alerting.alertmanager_repost_seconds)


def run_once(config: AlertmanagerConfig) -> int:
    """Post the open alerts again; to how many routes."""
    return alertmanager_repost(every_seconds=config.every_seconds)


def register() -> None:
    register_unit(
        "alertmanager", run_once, AlertmanagerConfig.from_options(alert_options.current()), stage=Stage.OBSERVE
    )
