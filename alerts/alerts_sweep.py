"""The ``alerts`` sweep, every ``LEITSTAND_ALERT_INTERVAL_SECONDS``: every alert rule is evaluated
and the open alerts reconciled — fired, resolved, escalated, notified again — through their routes
(``alerts/evaluation.py``). A rule that raises fires ``alert_rule_failing``; the others go on."""

from __future__ import annotations

from dataclasses import dataclass

from alerts import options as alert_options
from alerts.evaluation import alerts_evaluate
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class AlertsConfig:
    every_seconds: float

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "LEITSTAND_ALERT_INTERVAL_SECONDS", minimum=0.1)

    @classmethod
    def from_options(cls, alerting: alert_options.AlertingOptions) -> AlertsConfig:
        return cls(every_seconds=alerting.interval_seconds)


def run_once(config: AlertsConfig) -> dict:
    """Evaluate the rules and reconcile the alerts; counts of what changed."""
    return alerts_evaluate()


def register() -> None:
    register_unit("alerts", run_once, AlertsConfig.from_options(alert_options.current()), stage=Stage.OBSERVE)
