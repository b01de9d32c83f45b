"""The job types this installation runs. Imported once at start-up by ``WorkersConfig.ready``."""

from django.conf import settings

from jobs.retry import RetryPolicy
from workers import synthetic
from workers.registry import JobType, register

register(JobType(
    name="synthetic",
    description="Canaries, benchmarks and fault drills; payload {} is a no-op.",
    handler=synthetic.handle,
    pool="crawl",
    may_choose_pool=True,
    timeout_seconds=settings.LEITSTAND_SYNTHETIC["timeout_seconds"],
    lease_seconds=settings.LEITSTAND_SYNTHETIC["lease_seconds"],
    heartbeat_seconds=settings.LEITSTAND_SYNTHETIC["heartbeat_seconds"],
    retry=RetryPolicy(base_seconds=1, cap_seconds=60, max_attempts=settings.LEITSTAND_SYNTHETIC["max_attempts"]),
    processing_version="synthetic@1",
    expected_paths=(("work",),),
    default_priority=5,
))
