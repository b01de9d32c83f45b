"""The API's settings, declared once, typed and checked here: Django's settings are read at start-up
(``api/apps.py``, again when a test overrides one) into ``ApiOptions`` and handed to the
authentication, the rate limits and the body limit through ``current()``; nothing else in api/
reads ``django.conf`` (tests/api/test_options.py keeps it so).

| setting | option |
| --- | --- |
| ``LEITSTAND_API_MAX_BODY_BYTES`` | ``max_body_bytes``: a larger request body is refused with 413 before it is read |
| ``LEITSTAND_API_RATE_PER_MINUTE`` | ``rate_per_minute``: requests per client and minute |
| ``LEITSTAND_API_JOBS_PER_MINUTE`` | ``jobs_per_minute``: jobs a client may submit per minute |
| ``LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE`` | ``unauthenticated_per_minute``: refused tokens per address and minute |
| ``LEITSTAND_TRUSTED_PROXIES`` | ``trusted_proxies``: how many proxies in front set ``X-Forwarded-For`` |
| ``LEITSTAND_API_BULK_LANE_DEPTH`` | ``bulk_lane_depth``: planned jobs a pool's bulk lane holds before bulk submissions get 503 (0: no bound) |
| ``LEITSTAND_API_BULK_RETRY_AFTER_SECONDS`` | ``bulk_retry_after_seconds``: the ``Retry-After`` of that 503 |
| ``LEITSTAND_API_CLIENT_OPEN_JOBS`` | ``client_open_jobs``: open jobs a client may have before its submissions get 429, unless the client has its own bound (0: no bound) |
| ``LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS`` | ``open_jobs_retry_after_seconds``: the ``Retry-After`` of that 429 |
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.options import Current, require_number

SETTINGS = (
    "LEITSTAND_API_MAX_BODY_BYTES",
    "LEITSTAND_API_RATE_PER_MINUTE",
    "LEITSTAND_API_JOBS_PER_MINUTE",
    "LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE",
    "LEITSTAND_TRUSTED_PROXIES",
    "LEITSTAND_API_BULK_LANE_DEPTH",
    "LEITSTAND_API_BULK_RETRY_AFTER_SECONDS",
    "LEITSTAND_API_CLIENT_OPEN_JOBS",
    "LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS",
)


@dataclass(frozen=True)
class ApiOptions:
    max_body_bytes: int
    rate_per_minute: int
    jobs_per_minute: int
    unauthenticated_per_minute: int
    trusted_proxies: int
    bulk_lane_depth: int
    bulk_retry_after_seconds: int
    client_open_jobs: int
    open_jobs_retry_after_seconds: int

    def __post_init__(self) -> None:
        require_number(self.max_body_bytes, "LEITSTAND_API_MAX_BODY_BYTES", minimum=1024, whole=True)
        require_number(self.rate_per_minute, "LEITSTAND_API_RATE_PER_MINUTE", minimum=1, whole=True)
        require_number(self.jobs_per_minute, "LEITSTAND_API_JOBS_PER_MINUTE", minimum=1, whole=True)
        require_number(
            self.unauthenticated_per_minute, "LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE", minimum=1, whole=True
        )
        require_number(self.trusted_proxies, "LEITSTAND_TRUSTED_PROXIES", minimum=0, whole=True)
        require_number(self.bulk_lane_depth, "LEITSTAND_API_BULK_LANE_DEPTH", minimum=0, whole=True)
        require_number(self.bulk_retry_after_seconds, "LEITSTAND_API_BULK_RETRY_AFTER_SECONDS", minimum=1, whole=True)
        require_number(self.client_open_jobs, "LEITSTAND_API_CLIENT_OPEN_JOBS", minimum=0, whole=True)
        require_number(
            self.open_jobs_retry_after_seconds, "LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS", minimum=1, whole=True
        )

    @classmethod
    def from_settings(cls, settings) -> ApiOptions:
        """From Django's settings object (the caller's: api/ does not import django.conf)."""
        return cls(
            max_body_bytes=settings.LEITSTAND_API_MAX_BODY_BYTES,
            rate_per_minute=settings.LEITSTAND_API_RATE_PER_MINUTE,
            jobs_per_minute=settings.LEITSTAND_API_JOBS_PER_MINUTE,
            unauthenticated_per_minute=settings.LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE,
            trusted_proxies=settings.LEITSTAND_TRUSTED_PROXIES,
            bulk_lane_depth=settings.LEITSTAND_API_BULK_LANE_DEPTH,
            bulk_retry_after_seconds=settings.LEITSTAND_API_BULK_RETRY_AFTER_SECONDS,
            client_open_jobs=settings.LEITSTAND_API_CLIENT_OPEN_JOBS,
            open_jobs_retry_after_seconds=settings.LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS,
        )


_options: Current[ApiOptions] = Current("the API's", "api.apps.ApiConfig.ready")
configure, current = _options.configure, _options.get
