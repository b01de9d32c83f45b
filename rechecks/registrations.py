"""What the rechecks app adds to the runtime: the ``recheck`` job type, the planner sweep, and the
follow-up of every match the analysis reports."""

from rechecks import handler, planner_sweep
from rechecks.services import plan_request
from workers.runtime.job_types import pipeline_timing
from workers.runtime.registry import JobType, register


def match_followup(*, job, finding, content_hash: str, **signal) -> str:
    """``match_reported``: a reported copy gets its recheck plan, in the transaction that records it."""
    return f"recheck_plan:{plan_request(job=job, finding=finding, content_hash=content_hash).pk}"


def runtime_register() -> None:
    register(
        JobType(
            name="recheck",
            parse_payload=handler.parse,
            subject=handler.subject,
            description="Check a reported copy again and let its recheck plan's policy decide what follows.",
            handler=handler.handle,
            pool="recheck",
            processing_version=handler.PROCESSING_VERSION,
            expected_paths=("plan -> skipped", "plan robots? (fetch compare?)? decide -> done | skipped"),
            default_priority=5,
            **pipeline_timing(),
        )
    )
    planner_sweep.register()
