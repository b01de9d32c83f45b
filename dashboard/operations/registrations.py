"""What the console adds to the runtime: the ``alert_notify`` job type and the sweeps of its
operations engines (``DashboardConfig.ready``), each a unit of its own (``*_sweep.py``)."""

from dashboard.operations import (
    alertmanager_sweep,
    alerts_sweep,
    bulk_sweep,
    deadletters_sweep,
    notify,
    retention_sweep,
    route_tests_sweep,
    rules_sweep,
    snapshot_sweep,
    trends_sweep,
)
from workers.runtime.job_types import delivery_timing
from workers.runtime.registry import JobType, register


def runtime_register() -> None:
    register(
        JobType(
            name="alert_notify",
            description="Deliver an alert event to a route: a signed webhook, an e-mail or Alertmanager.",
            handler=notify.handle,
            pool="notify",
            processing_version="notify@1",
            expected_paths=("webhook", "email", "alertmanager"),
            is_system_only=True,
            **delivery_timing(),
        )
    )
    for unit in (
        bulk_sweep,
        snapshot_sweep,
        trends_sweep,
        deadletters_sweep,
        rules_sweep,
        retention_sweep,
        alerts_sweep,
        route_tests_sweep,
        alertmanager_sweep,
    ):
        unit.register()
