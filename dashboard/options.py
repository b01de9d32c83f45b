"""The console's settings, declared once, typed and checked here: Django's settings are read at
start-up (``dashboard/apps.py``, again when a test overrides one) into ``ConsoleOptions`` and handed to
the pages, the snapshot, the review workspace and ``/metrics`` through ``current()``. The console also
reads the runtime's options (``workers.runtime.options.current()``: the pools, the lease grace) and
the engine's; alerting's and the history's are their apps' own (``alerts/options.py``,
``history/options.py``).

| setting (``LEITSTAND_CONSOLE[…]`` from the environment variable) | option |
| --- | --- |
| ``snapshot_seconds`` (``LEITSTAND_CONSOLE_SNAPSHOT_SECONDS``) | how often the home page's counts are refreshed |
| ``deadletters_seconds`` (``LEITSTAND_CONSOLE_DEADLETTERS_SECONDS``) | how often the dead letters are regrouped |
| ``quiet_source_hours`` (``LEITSTAND_QUIET_SOURCE_HOURS``) | an active source without a candidate this long is quiet |
| ``recheck_overdue_seconds`` (``LEITSTAND_RECHECK_OVERDUE_SECONDS``) | a recheck this late is overdue |
| ``stuck_heartbeat_intervals`` (``LEITSTAND_STUCK_HEARTBEAT_INTERVALS``) | a lease this many heartbeats silent is stuck |
| ``review_lease_seconds`` (``LEITSTAND_REVIEW_LEASE_SECONDS``) | how long a reviewer holds an opened case |
| ``rollup_days`` (``LEITSTAND_ROLLUP_DAYS``) | how long the trend charts' rollups are kept |
| ``LEITSTAND_METRICS_TOKEN``, ``LEITSTAND_METRICS_ALLOWED_IPS`` | ``metrics_token``, ``metrics_allowed_ips``: who may scrape |
| ``LEITSTAND_TRACE_URL`` | ``trace_url``: a job page's link to its trace (``{trace_id}`` in a URL template) |
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.options import Current, OptionError, require_number

SETTINGS = (
    "LEITSTAND_CONSOLE",
    "LEITSTAND_METRICS_TOKEN",
    "LEITSTAND_METRICS_ALLOWED_IPS",
    "LEITSTAND_TRACE_URL",
)
# Each key of LEITSTAND_CONSOLE: the environment variable that sets it, and the least it may be.
CONSOLE_KEYS = {
    "snapshot_seconds": ("LEITSTAND_CONSOLE_SNAPSHOT_SECONDS", 0.5),
    "deadletters_seconds": ("LEITSTAND_CONSOLE_DEADLETTERS_SECONDS", 1),
    "quiet_source_hours": ("LEITSTAND_QUIET_SOURCE_HOURS", 0.01),
    "recheck_overdue_seconds": ("LEITSTAND_RECHECK_OVERDUE_SECONDS", 1),
    "stuck_heartbeat_intervals": ("LEITSTAND_STUCK_HEARTBEAT_INTERVALS", 1),
    "review_lease_seconds": ("LEITSTAND_REVIEW_LEASE_SECONDS", 10),
    "rollup_days": ("LEITSTAND_ROLLUP_DAYS", 1),
}


@dataclass(frozen=True)
class ConsoleOptions:
    snapshot_seconds: float
    deadletters_seconds: float
    quiet_source_hours: float
    recheck_overdue_seconds: float
    stuck_heartbeat_intervals: float
    review_lease_seconds: float
    rollup_days: float
    metrics_token: str
    metrics_allowed_ips: frozenset[str]
    trace_url: str

    def __post_init__(self) -> None:
        for name, (setting, minimum) in CONSOLE_KEYS.items():
            require_number(getattr(self, name), setting, minimum=minimum)
        if self.trace_url and (
            not self.trace_url.startswith(("https://", "http://")) or self.trace_url.count("{trace_id}") != 1
        ):
            raise OptionError(
                f"LEITSTAND_TRACE_URL is an http(s) URL with {{trace_id}} once in it, got {self.trace_url!r}"
            )

    def trace_link(self, trace_id: str) -> str:
        """The URL of a trace in the tracing system (``LEITSTAND_TRACE_URL``); '' without one."""
        return self.trace_url.replace("{trace_id}", trace_id) if self.trace_url and trace_id else ""

    @classmethod
    def from_settings(cls, settings) -> ConsoleOptions:
        """From Django's settings object (the caller's)."""
        console = dict(settings.LEITSTAND_CONSOLE)
        unknown = sorted(set(console) - set(CONSOLE_KEYS))
        if unknown:
            raise OptionError(f"LEITSTAND_CONSOLE has no {', '.join(unknown)}; it knows {', '.join(CONSOLE_KEYS)}")
        return cls(
            **console,
            metrics_token=settings.LEITSTAND_METRICS_TOKEN,
            metrics_allowed_ips=frozenset(settings.LEITSTAND_METRICS_ALLOWED_IPS),
            trace_url=settings.LEITSTAND_TRACE_URL,
        )


_options: Current[ConsoleOptions] = Current("the console's", "dashboard.apps.DashboardConfig.ready")
configure, current = _options.configure, _options.get
