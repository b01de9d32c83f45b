"""The pipeline's settings, declared once, typed and checked here: Django's settings are read at
start-up (``workers/apps.py``, again when a test overrides one) into ``PipelineOptions`` and handed to
the crawler, the analysis, the image decoder, the HTTP client and the schedules through
``current()``; nothing else in workers/pipeline/ reads ``django.conf`` (tests/pipeline/test_options.py
keeps it so, as for jobs/ and workers/runtime/).

| setting | option |
| --- | --- |
| ``LEITSTAND_FETCH`` | ``fetch``: every fetch's timeouts, deadline and limits (``http.FetchPolicy``'s fields) |
| ``LEITSTAND_POLITENESS`` | ``politeness``: per-host spacing and breaker (``politeness.PolitenessPolicy``'s fields) |
| ``LEITSTAND_HTTP_ALLOWED_TARGETS`` | ``http_allowed_targets``: host:port pairs the crawler may reach although not public |
| ``LEITSTAND_NOTIFY_ALLOWED_TARGETS`` | ``notify_allowed_targets``: the same for webhooks and notifications |
| ``LEITSTAND_IMAGE_MAX_PIXELS`` | ``image_max_pixels``: larger images are refused from their header |
| ``LEITSTAND_ANALYSIS_VERSION`` | ``analysis_version``: the analysis the pools run (checked against the handler's versions: E013) |
| ``LEITSTAND_ANALYSIS`` | ``bands``: the score bands, ``0 < no_match_below <= match_at <= 1`` |
| ``LEITSTAND_CRAWL_EVERY_MINUTES`` | ``crawl_every_minutes``: a source's schedule when it sets none |
| ``LEITSTAND_CRAWL_SCHEDULE_SECONDS``, ``_STARTS`` | ``crawl_schedule_seconds``, ``crawl_schedule_starts``: the schedule sweep |
| ``TIME_ZONE`` | ``time_zone``: a source's crawl window's zone when it sets none |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from jobs.options import Current, OptionError, require_number

SETTINGS = (
    "LEITSTAND_FETCH",
    "LEITSTAND_POLITENESS",
    "LEITSTAND_HTTP_ALLOWED_TARGETS",
    "LEITSTAND_NOTIFY_ALLOWED_TARGETS",
    "LEITSTAND_IMAGE_MAX_PIXELS",
    "LEITSTAND_ANALYSIS_VERSION",
    "LEITSTAND_ANALYSIS",
    "LEITSTAND_CRAWL_EVERY_MINUTES",
    "LEITSTAND_CRAWL_SCHEDULE_SECONDS",
    "LEITSTAND_CRAWL_SCHEDULE_STARTS",
    "TIME_ZONE",
)
# The numbers of a fetch and of politeness, each with the least it may be; what is whole is an int.
_FETCH = {"connect_timeout": 0.1, "read_timeout": 0.1, "total_seconds": 0.1, "max_body_bytes": 1024, "max_redirects": 0}
_POLITENESS = {
    "min_delay_seconds": 0.0,
    "retry_after_cap_seconds": 0.0,
    "crawl_delay_cap_seconds": 0.0,
    "delay_factor": 0.0,
    "max_wait_seconds": 60.0,
    "hold_seconds": 1.0,
    "failures_to_open": 1,
    "open_for_seconds": 1.0,
}
_WHOLE = {"max_body_bytes", "max_redirects", "failures_to_open"}


def _numbers(setting: str, values: Mapping, known: Mapping[str, float]) -> Mapping:
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise OptionError(f"{setting} has no {', '.join(unknown)}; it knows {', '.join(known)}")
    for name, value in values.items():
        require_number(value, f'{setting}["{name}"]', minimum=known[name], whole=name in _WHOLE)
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class PipelineOptions:
    fetch: Mapping[str, float]
    politeness: Mapping[str, float]
    http_allowed_targets: frozenset[str]
    notify_allowed_targets: frozenset[str]
    image_max_pixels: int
    analysis_version: str
    bands: Mapping[str, float]
    crawl_every_minutes: int
    crawl_schedule_seconds: float
    crawl_schedule_starts: int
    time_zone: str

    def __post_init__(self) -> None:
        _numbers("LEITSTAND_FETCH", self.fetch, _FETCH)
        _numbers("LEITSTAND_POLITENESS", self.politeness, _POLITENESS)
        require_number(self.image_max_pixels, "LEITSTAND_IMAGE_MAX_PIXELS", minimum=10_000, whole=True)
        require_number(self.crawl_every_minutes, "LEITSTAND_CRAWL_EVERY_MINUTES", minimum=1, whole=True)
        require_number(self.crawl_schedule_seconds, "LEITSTAND_CRAWL_SCHEDULE_SECONDS", minimum=1)
        require_number(self.crawl_schedule_starts, "LEITSTAND_CRAWL_SCHEDULE_STARTS", minimum=1, whole=True)
        if set(self.bands) != {"match_at", "no_match_below"}:
            raise OptionError("LEITSTAND_ANALYSIS must name exactly match_at and no_match_below")
        for name in self.bands:
            require_number(self.bands[name], f'LEITSTAND_ANALYSIS["{name}"]', minimum=0)
        if not 0 < self.bands["no_match_below"] <= self.bands["match_at"] <= 1:
            raise OptionError(
                f"analysis score bands: no_match_below {self.bands['no_match_below']:g} and match_at "
                f"{self.bands['match_at']:g} must satisfy 0 < no_match_below <= match_at <= 1 "
                "(LEITSTAND_ANALYSIS_NO_MATCH_BELOW, LEITSTAND_ANALYSIS_MATCH_AT)"
            )

    @classmethod
    def from_settings(cls, settings) -> PipelineOptions:
        """From Django's settings object (the caller's: workers/pipeline/ does not import django.conf)."""
        return cls(
            fetch=MappingProxyType(dict(settings.LEITSTAND_FETCH)),
            politeness=MappingProxyType(dict(settings.LEITSTAND_POLITENESS)),
            http_allowed_targets=frozenset(settings.LEITSTAND_HTTP_ALLOWED_TARGETS),
            notify_allowed_targets=frozenset(settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS),
            image_max_pixels=settings.LEITSTAND_IMAGE_MAX_PIXELS,
            analysis_version=settings.LEITSTAND_ANALYSIS_VERSION,
            bands=MappingProxyType(dict(settings.LEITSTAND_ANALYSIS)),
            crawl_every_minutes=settings.LEITSTAND_CRAWL_EVERY_MINUTES,
            crawl_schedule_seconds=settings.LEITSTAND_CRAWL_SCHEDULE_SECONDS,
            crawl_schedule_starts=settings.LEITSTAND_CRAWL_SCHEDULE_STARTS,
            time_zone=settings.TIME_ZONE,
        )


_options: Current[PipelineOptions] = Current("the pipeline's", "workers.apps.WorkersConfig.ready")
configure, current = _options.configure, _options.get
