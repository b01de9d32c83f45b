"""The ``route-tests`` sweep, every minute: each alert route with channels and a test interval whose
last test is older than that interval gets a test notification whose receipt a person confirms
(``alerts/receipts.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.receipts import receipt_tests_send
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class RouteTestsConfig:
    every_seconds: float = 60.0

    def __post_init__(self) -> None:
        require_number(self.every_seconds, "the route-tests sweep's interval", minimum=1)


def run_once(config: RouteTestsConfig) -> int:
    """Send the tests that are due; how many."""
    return receipt_tests_send()


def register() -> None:
    register_unit("route-tests", run_once, RouteTestsConfig(), stage=Stage.OBSERVE)
