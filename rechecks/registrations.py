"""What the rechecks app adds to the runtime: the ``recheck`` job type, the planner sweep, and the
follow-up of every match the analysis reports."""

from django.db.models import OuterRef

from jobs.records import Part, columns, record_part_register, rows_json
from rechecks import handler, planner_sweep
from rechecks.models import Observation, RecheckPlan
from rechecks.services import plan_request
from workers.runtime.job_types import pipeline_timing
from workers.runtime.registry import JobType, register


def match_followup(*, job, finding, content_hash: str, **signal) -> str:
    """``match_reported``: a reported copy gets its recheck plan, in the transaction that records it."""
    return f"recheck_plan:{plan_request(job=job, finding=finding, content_hash=content_hash).pk}"


# A job's recheck plan, with its observations in order: a part of the job's record (jobs/records.py).
RECHECK_PLAN = Part(
    "recheck_plan",
    lambda: rows_json(
        RecheckPlan,
        {**columns(RecheckPlan), "observations": rows_json(Observation, order="sequence", plan=OuterRef("pk"))},
        job=OuterRef("pk"),
    ),
    one=True,
)


def runtime_register() -> None:
    record_part_register(RECHECK_PLAN)
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
