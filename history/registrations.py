"""What the history adds (``HistoryConfig.ready``): the retention sweep, and its alert rule with the
alerts."""

from alerts.alert_rules import rule_register
from history import retention_sweep
from history.alert_rules import ARCHIVE_FAILING


def runtime_register() -> None:
    retention_sweep.register()
    rule_register(ARCHIVE_FAILING)
