"""What the console adds to the runtime: the ``alert_notify`` job type and the sweeps of its
operations engines (``DashboardConfig.ready``)."""

from django.conf import settings

from dashboard.operations import notify
from dashboard.operations.alerts import alerts_evaluate
from dashboard.operations.bulk import bulk_step
from dashboard.operations.deadletters import dead_letters_refresh
from dashboard.operations.receipts import receipt_tests_send
from dashboard.operations.retention import retention_sweep
from dashboard.operations.rules import rules_evaluate
from dashboard.operations.snapshot import snapshot_refresh
from dashboard.operations.trends import rollups_record
from workers.runtime.job_types import delivery_timing
from workers.runtime.registry import JobType, register
from workers.runtime.sweeps import Stage, register_sweep


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
    console = settings.LEITSTAND_CONSOLE
    register_sweep("bulk-actions", bulk_step, stage=Stage.PLAN)
    register_sweep("console-snapshot", snapshot_refresh, stage=Stage.OBSERVE, every_seconds=console["snapshot_seconds"])
    register_sweep("trend-rollups", rollups_record, stage=Stage.OBSERVE, every_seconds=15)  # each minute once
    register_sweep(
        "dead-letters", dead_letters_refresh, stage=Stage.OBSERVE, every_seconds=console["deadletters_seconds"]
    )
    register_sweep(
        "business-rules", rules_evaluate, stage=Stage.OBSERVE, every_seconds=settings.LEITSTAND_BUSINESS_RULES_SECONDS
    )
    register_sweep(
        "retention",
        retention_sweep,
        stage=Stage.OBSERVE,
        every_seconds=settings.LEITSTAND_RETENTION["every_seconds"],
        fenced=False,  # it commits as it goes (archive before purge) and fences each step itself
    )
    register_sweep(
        "alerts", alerts_evaluate, stage=Stage.OBSERVE, every_seconds=settings.LEITSTAND_ALERT_INTERVAL_SECONDS
    )
    register_sweep("route-tests", receipt_tests_send, stage=Stage.OBSERVE, every_seconds=60)
    register_sweep(
        "alertmanager",
        notify.alertmanager_repost,
        stage=Stage.OBSERVE,
        every_seconds=settings.LEITSTAND_ALERTMANAGER_REPOST_SECONDS,
    )
