"""The job types this installation runs. Imported once at start-up by ``WorkersConfig.ready``."""

import functools

from django.conf import settings

from dashboard import notify
from jobs.retry import RetryPolicy
from rechecks import handler as recheck
from workers import analysis, crawl, replay, synthetic, webhook
from workers.registry import JobType, register

register(
    JobType(
        name="synthetic",
        parse_payload=synthetic.parse,
        description="Canaries, benchmarks and fault drills; payload {} is a no-op.",
        handler=synthetic.handle,
        pool="crawl",
        may_choose_pool=True,
        timeout_seconds=settings.LEITSTAND_SYNTHETIC["timeout_seconds"],
        lease_seconds=settings.LEITSTAND_SYNTHETIC["lease_seconds"],
        heartbeat_seconds=settings.LEITSTAND_SYNTHETIC["heartbeat_seconds"],
        retry=RetryPolicy(base_seconds=1, cap_seconds=60, max_attempts=settings.LEITSTAND_SYNTHETIC["max_attempts"]),
        processing_version="synthetic@1",
        expected_paths=("work", "fetch parse store"),
        default_priority=5,
    )
)

_PIPELINE = settings.LEITSTAND_PIPELINE
# Retries of a failing site back off up to ten minutes (a Retry-After may ask for longer: capped here).
_PIPELINE_RETRY = RetryPolicy(base_seconds=2, cap_seconds=600, max_attempts=_PIPELINE["max_attempts"])
_PIPELINE_TIMING = {
    "timeout_seconds": _PIPELINE["timeout_seconds"],
    "lease_seconds": _PIPELINE["lease_seconds"],
    "heartbeat_seconds": _PIPELINE["heartbeat_seconds"],
    "retry": _PIPELINE_RETRY,
    "external_call_timeout_seconds": settings.LEITSTAND_FETCH["total_seconds"],
}

register(
    JobType(
        name="crawl",
        parse_payload=crawl.parse,
        description="Fetch one page of a source: candidates for its images, crawl jobs for its in-scope links.",
        handler=crawl.handle,
        pool="crawl",
        processing_version="crawl@1",
        expected_paths=("-> skipped", "robots -> skipped", "robots fetch extract candidates spawn"),
        default_priority=5,
        **_PIPELINE_TIMING,
    )
)

register(
    JobType(
        name="analysis",
        parse_payload=analysis.parse,
        description="Download a candidate image and compare it with the protected assets.",
        handler=analysis.handle,
        pool="analysis",
        processing_version=analysis.PROCESSING_VERSION,
        shadow_versions={analysis.TIGHT_VERSION: functools.partial(analysis.handle, bands=analysis.TIGHT_BANDS)},
        expected_paths=(
            "robots -> skipped",
            "robots fetch decode compare -> skipped",
            "robots fetch decode compare record -> recheck | done | review",
        ),
        default_priority=5,
        **_PIPELINE_TIMING,
    )
)

register(
    JobType(
        name="recheck",
        parse_payload=recheck.parse,
        description="Check a reported copy again and let its recheck plan's policy decide what follows.",
        handler=recheck.handle,
        pool="recheck",
        processing_version=recheck.PROCESSING_VERSION,
        expected_paths=("plan -> skipped", "plan robots? (fetch compare?)? decide -> done | skipped"),
        default_priority=5,
        **_PIPELINE_TIMING,
    )
)

# Deliveries (alert notifications, API webhooks): small, urgent, retried with backoff up to 15 min.
_NOTIFY = settings.LEITSTAND_NOTIFY
_DELIVERY = {
    "default_priority": 1,
    "timeout_seconds": _NOTIFY["timeout_seconds"],
    "lease_seconds": _NOTIFY["lease_seconds"],
    "heartbeat_seconds": _NOTIFY["heartbeat_seconds"],
    "retry": RetryPolicy(base_seconds=5, cap_seconds=900, max_attempts=_NOTIFY["max_attempts"]),
    "external_call_timeout_seconds": _NOTIFY["http_timeout_seconds"],
}

register(
    JobType(
        name="alert_notify",
        description="Deliver an alert event to its route: a signed webhook or an e-mail.",
        handler=notify.handle,
        pool="notify",
        processing_version="notify@1",
        expected_paths=("webhook", "email"),
        **_DELIVERY,
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
        **_DELIVERY,
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
        default_priority=9,
        **_PIPELINE_TIMING,
    )
)
