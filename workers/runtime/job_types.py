"""The runtime's own job types (synthetic canaries, API webhooks, shadow runs) and the timing profiles
that the apps above it use for theirs. Each app registers its types in ``AppConfig.ready()``."""

from django.conf import settings

from jobs.retry import RetryPolicy
from workers.runtime import replay, synthetic, webhook
from workers.runtime.registry import JobType, register


def pipeline_timing() -> dict:
    """Jobs that talk to crawled sites: retries of a failing site back off up to ten minutes (a
    Retry-After may ask for longer: capped here)."""
    pipeline = settings.LEITSTAND_PIPELINE
    return {
        "timeout_seconds": pipeline["timeout_seconds"],
        "lease_seconds": pipeline["lease_seconds"],
        "heartbeat_seconds": pipeline["heartbeat_seconds"],
        "retry": RetryPolicy(base_seconds=2, cap_seconds=600, max_attempts=pipeline["max_attempts"]),
        "external_call_timeout_seconds": settings.LEITSTAND_FETCH["total_seconds"],
    }


def delivery_timing() -> dict:
    """Deliveries (alert notifications, API webhooks): small, urgent, retried with backoff up to 15 min."""
    notify = settings.LEITSTAND_NOTIFY
    return {
        "default_priority": 1,
        "timeout_seconds": notify["timeout_seconds"],
        "lease_seconds": notify["lease_seconds"],
        "heartbeat_seconds": notify["heartbeat_seconds"],
        "retry": RetryPolicy(base_seconds=5, cap_seconds=900, max_attempts=notify["max_attempts"]),
        "external_call_timeout_seconds": notify["http_timeout_seconds"],
    }


def job_types_register() -> None:
    synthetic_settings = settings.LEITSTAND_SYNTHETIC
    register(
        JobType(
            name="synthetic",
            parse_payload=synthetic.parse,
            description="Canaries, benchmarks and fault drills; payload {} is a no-op.",
            handler=synthetic.handle,
            pool="synthetic",
            may_choose_pool=True,
            client_scope="jobs:synthetic",
            timeout_seconds=synthetic_settings["timeout_seconds"],
            lease_seconds=synthetic_settings["lease_seconds"],
            heartbeat_seconds=synthetic_settings["heartbeat_seconds"],
            retry=RetryPolicy(base_seconds=1, cap_seconds=60, max_attempts=synthetic_settings["max_attempts"]),
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
