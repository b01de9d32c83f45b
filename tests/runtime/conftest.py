import uuid

import pytest

from jobs.retry import RetryPolicy
from workers.runtime.registry import JobType, registry


@pytest.fixture
def job_type_factory():
    """Register throw-away job types for one test."""
    registered = []

    def declare(handler, **overrides) -> JobType:
        fields = {
            "name": f"test_{uuid.uuid4().hex[:8]}",
            "handler": handler,
            "pool": "analysis",
            "timeout_seconds": 5,
            "lease_seconds": 30,
            "heartbeat_seconds": 1,
            "retry": RetryPolicy(base_seconds=1, cap_seconds=5),
            "processing_version": "test@1",
            "expected_paths": ("work",),
        }
        fields.update(overrides)
        job_type = registry.register(JobType(**fields))
        registered.append(job_type.name)
        return job_type

    yield declare
    for name in registered:
        registry.unregister(name)
