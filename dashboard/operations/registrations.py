"""What the console adds to the runtime (``DashboardConfig.ready``): the sweeps of its operations
engines, each a unit of its own (``*_sweep.py``), and its alert rule with the alerts."""

from alerts.alert_rules import rule_register
from dashboard.operations import bulk_sweep, deadletters, deadletters_sweep, snapshot_sweep, trends_sweep


def runtime_register() -> None:
    for unit in (bulk_sweep, snapshot_sweep, trends_sweep, deadletters_sweep):
        unit.register()
    rule_register(deadletters.UNREVIEWED_RULE)
