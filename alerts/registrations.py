"""What alerting adds to the runtime (``AlertsConfig.ready``): the ``alert_notify`` job type and its
sweeps, each a unit of its own (``*_sweep.py``)."""

from alerts import alertmanager_sweep, alerts_sweep, business_rules_sweep, notify, route_tests_sweep
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
    for unit in (business_rules_sweep, alerts_sweep, route_tests_sweep, alertmanager_sweep):
        unit.register()
