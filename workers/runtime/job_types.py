"""The runtime's own job types (synthetic canaries, API webhooks, shadow runs) and the timing profiles
that the apps above it use for theirs. Each app registers its types in ``AppConfig.ready()``."""

from django.db.models import OuterRef

from jobs.records import Part, record_part_register, rows_json
from jobs.retry import RetryPolicy
from workers.runtime import options, replay, synthetic, webhook
from workers.runtime.models import ShadowRun
from workers.runtime.registry import JobType, register


def pipeline_timing() -> dict:
    """Jobs that talk to crawled sites: retries of a failing site back off up to ten minutes (a
    Retry-After may ask for longer: capped here)."""
    runtime = options.current()
    return {
        **_timing(runtime.pipeline),
        "retry": RetryPolicy(base_seconds=2, cap_seconds=600, max_attempts=runtime.pipeline.max_attempts),
        "external_call_timeout_seconds": runtime.fetch_total_seconds,
    }


def delivery_timing() -> dict:
    """Deliveries (alert notifications, API webhooks): small, urgent, retried with backoff up to 15 min."""
    notify = options.current().notify
    return {
        "default_priority": 1,
        **_timing(notify),
        "retry": RetryPolicy(base_seconds=5, cap_seconds=900, max_attempts=notify.max_attempts),
        "external_call_timeout_seconds": notify.http_timeout_seconds,
    }


def _timing(timing: options.Timing) -> dict:
    return {
        "timeout_seconds": timing.timeout_seconds,
        "lease_seconds": timing.lease_seconds,
        "heartbeat_seconds": timing.heartbeat_seconds,
    }


# The shadow runs of a job (its input run by other handler versions): a part of its record.
SHADOW_RUNS = Part("shadow_runs", lambda: rows_json(ShadowRun, job=OuterRef("pk")))


def job_types_register() -> None:
    record_part_register(SHADOW_RUNS)
    synthetic_timing = options.current().synthetic
    register(
        JobType(
            name="synthetic",
            parse_payload=synthetic.parse,
            description="Canaries, benchmarks and fault drills; payload {} is a no-op.",
            handler=synthetic.handle,
            pool="synthetic",
            may_choose_pool=True,
            client_scope="jobs:synthetic",
            flow_key="client",  # one API client's flood does not hold back another's
            **_timing(synthetic_timing),
            retry=RetryPolicy(base_seconds=1, cap_seconds=60, max_attempts=synthetic_timing.max_attempts),
            processing_version="synthetic@1",
            expected_paths=("work", "fetch parse store"),
            default_priority=5,
        )
    )
    register(
        JobType(
            name="api_webhook",
            description="Deliver an event (job done, dead, ready for review; recheck plan ended) to the PHP core's webhook.",
            handler=webhook.handle_api_webhook,
            pool="notify",
            processing_version="webhook@1",
            expected_paths=("webhook",),
            is_system_only=True,
            **delivery_timing(),
        )
    )
    register(
        JobType(
            name="shadow",
            description="A sampled shadow run: another handler version on a finished job's input, compared (LEITSTAND_SHADOW_SAMPLES).",
            handler=replay.handle_shadow,
            pool="analysis",
            may_choose_pool=True,  # runs in the pool of the job it shadows, in the bulk lane
            processing_version="shadow@1",
            expected_paths=("shadow",),
            is_system_only=True,
            default_priority=9,
            **pipeline_timing(),
        )
    )
