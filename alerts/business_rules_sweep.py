"""The ``business-rules`` sweep, every ``LEITSTAND_BUSINESS_RULES_SECONDS``: the pipeline's business
rules (``alerts/business_rules.py``) are evaluated; violations are opened, refreshed or resolved.
A rule that raises is reported in the result and the others go on."""

from __future__ import annotations

from dataclasses import dataclass

from alerts import options as alert_options
from alerts.business_rules import rules_evaluate
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class RulesConfig:
    every_seconds: float

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "LEITSTAND_BUSINESS_RULES_SECONDS", minimum=1)

    @classmethod
    def from_options(cls, alerting: alert_options.AlertingOptions) -> RulesConfig:
        return cls(every_seconds=alerting.business_rules_seconds)


def run_once(config: RulesConfig) -> dict:
    """Evaluate every rule; what each found."""
    return rules_evaluate()


def register() -> None:
    register_unit("business-rules", run_once, RulesConfig.from_options(alert_options.current()), stage=Stage.OBSERVE)
