"""The console's settings, declared once, typed and checked here: Django's settings are read at
start-up (``dashboard/apps.py``, again when a test overrides one) into ``ConsoleOptions`` and handed to
the pages, the snapshot, the review workspace and ``/metrics`` through ``current()``. The console also
reads the runtime's options (``workers.runtime.options.current()``: the pools, the lease grace) and
the engine's. Two areas have options of their own inside it: ``alerting`` (``AlertingOptions``: the
alert rules, routes, notifications and business rules) and ``retention`` (``RetentionOptions``: what
leaves the database when, and where the archive is).

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
| ``LEITSTAND_ALERTS``, ``LEITSTAND_ALERT_INTERVAL_SECONDS`` | ``alerting.rules``, ``alerting.interval_seconds`` |
| ``LEITSTAND_ALERT_ROUTES``, ``LEITSTAND_ALERT_FALLBACK_ROUTE`` | ``alerting.routes``, ``alerting.fallback_route`` |
| ``LEITSTAND_ALERTMANAGER_REPOST_SECONDS``, ``LEITSTAND_PUBLIC_URL`` | ``alerting.alertmanager_repost_seconds``, ``alerting.public_url`` |
| ``LEITSTAND_NOTIFY["http_timeout_seconds"]`` | ``alerting.http_timeout_seconds`` (the type's timing is the runtime's) |
| ``LEITSTAND_BUSINESS_RULES``, ``LEITSTAND_BUSINESS_RULES_SECONDS`` | ``alerting.business_rules``, ``alerting.business_rules_seconds`` |
| ``LEITSTAND_RETENTION[…]`` (``LEITSTAND_RETENTION_*``, ``LEITSTAND_PARTITION_*``) | ``retention.<key>`` |
| ``LEITSTAND_ARCHIVE_DIR``, ``LEITSTAND_DATABASE_MAINTENANCE_URL`` | ``retention.archive_dir``, ``retention.maintenance_url`` |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from jobs.options import OptionError, require_number

SETTINGS = (
    "LEITSTAND_CONSOLE",
    "LEITSTAND_METRICS_TOKEN",
    "LEITSTAND_METRICS_ALLOWED_IPS",
    "LEITSTAND_TRACE_URL",
    "LEITSTAND_ALERTS",
    "LEITSTAND_ALERT_INTERVAL_SECONDS",
    "LEITSTAND_ALERT_ROUTES",
    "LEITSTAND_ALERT_FALLBACK_ROUTE",
    "LEITSTAND_ALERTMANAGER_REPOST_SECONDS",
    "LEITSTAND_PUBLIC_URL",
    "LEITSTAND_NOTIFY",
    "LEITSTAND_BUSINESS_RULES",
    "LEITSTAND_BUSINESS_RULES_SECONDS",
    "LEITSTAND_RETENTION",
    "LEITSTAND_ARCHIVE_DIR",
    "LEITSTAND_DATABASE_MAINTENANCE_URL",
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


def _frozen(value: Mapping) -> Mapping:
    """A read-only copy of a nested dictionary setting."""
    return MappingProxyType({key: _frozen(item) if isinstance(item, Mapping) else item for key, item in value.items()})


# The ended states a job is retained in, and each key of LEITSTAND_RETENTION that is a number: the
# environment variable that sets it, the least it may be, and whether it is whole.
RETENTION_STATES = ("done", "cancelled", "dead")
RETENTION_NUMBERS = {
    "finding_days": ("LEITSTAND_RETENTION_FINDING_DAYS", 0, False),
    "plan_days": ("LEITSTAND_RETENTION_PLAN_DAYS", 0, False),
    "batch_days": ("LEITSTAND_RETENTION_BATCH_DAYS", 0, False),
    "alert_days": ("LEITSTAND_RETENTION_ALERT_DAYS", 0, False),
    "login_log_days": ("LEITSTAND_RETENTION_LOGIN_LOG_DAYS", 0, False),
    "task_days": ("LEITSTAND_RETENTION_TASK_DAYS", 0, False),
    "audit_days": ("LEITSTAND_RETENTION_AUDIT_DAYS", 0, False),
    "archive_index_days": ("LEITSTAND_RETENTION_ARCHIVE_INDEX_DAYS", 0, False),
    "partition_days_ahead": ("LEITSTAND_PARTITION_DAYS_AHEAD", 1, True),
    "partition_keep_days": ("LEITSTAND_PARTITION_KEEP_DAYS", 1, True),
    "trees_per_round": ("LEITSTAND_RETENTION_TREES_PER_ROUND", 1, True),
    "jobs_per_file": ("LEITSTAND_RETENTION_JOBS_PER_FILE", 1, True),
    "seconds_per_round": ("LEITSTAND_RETENTION_SECONDS_PER_ROUND", 0.1, False),
    "every_seconds": ("LEITSTAND_RETENTION_EVERY_SECONDS", 0, False),
}


@dataclass(frozen=True)
class RetentionOptions:
    """What leaves the database when (docs/operations.md, "Retention and the archive")."""

    archive_dir: Path = Path(__file__).resolve().parents[1] / "var" / "archive"  # as config/settings.py
    maintenance_url: str = ""
    enabled: bool = True
    days: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({"done": 14, "cancelled": 14, "dead": 90})
    )
    # Per job type, days per ended state; which types exist is checked with the registry (leitstand.E012).
    types: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    finding_days: float = 400
    plan_days: float = 90
    batch_days: float = 90
    alert_days: float = 90
    login_log_days: float = 30
    task_days: float = 7
    audit_days: float = 400
    archive_index_days: float = 90
    partition_days_ahead: int = 7
    partition_keep_days: int = 14
    trees_per_round: int = 500
    jobs_per_file: int = 1000
    seconds_per_round: float = 2.0
    every_seconds: float = 60

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise OptionError(f"LEITSTAND_RETENTION_ENABLED must be true or false, not {self.enabled!r}")
        if set(self.days) != set(RETENTION_STATES):
            raise OptionError(f"LEITSTAND_RETENTION['days'] must give days for {', '.join(RETENTION_STATES)}")
        for state, days in self.days.items():
            require_number(days, f"LEITSTAND_RETENTION_{state.upper()}_DAYS", minimum=0)
        for name, (setting, minimum, whole) in RETENTION_NUMBERS.items():
            require_number(getattr(self, name), setting, minimum=minimum, whole=whole)

    def days_for(self, job_type: str, state: str) -> float:
        """How many days a job of ``job_type`` that ended in ``state`` is kept."""
        return float(self.types.get(job_type, {}).get(state, self.days[state]))

    def shortest_days(self) -> float:
        """The shortest retention of any type and state: no job that ended later can leave."""
        return min([*self.days.values(), *(days for per_type in self.types.values() for days in per_type.values())])

    @classmethod
    def from_settings(cls, settings) -> RetentionOptions:
        retention = dict(settings.LEITSTAND_RETENTION)
        known = {"enabled", "days", "types", *RETENTION_NUMBERS}
        unknown = sorted(set(retention) - known)
        if unknown:
            raise OptionError(f"LEITSTAND_RETENTION has no {', '.join(unknown)}")
        types = retention.pop("types", {})
        return cls(
            archive_dir=Path(settings.LEITSTAND_ARCHIVE_DIR),
            maintenance_url=settings.LEITSTAND_DATABASE_MAINTENANCE_URL,
            days=_frozen(retention.pop("days", cls.__dataclass_fields__["days"].default_factory())),
            # A malformed override is left to the system check, which names the registered types.
            types=_frozen(types) if isinstance(types, Mapping) else MappingProxyType({}),
            **retention,
        )


@dataclass(frozen=True)
class AlertingOptions:
    """The alert rules' thresholds, the routes the setting declares, how notifications are sent, and
    the business rules (docs/operations.md, "Alerts")."""

    rules: Mapping[str, Mapping] = field(default_factory=lambda: MappingProxyType({}))
    interval_seconds: float = 10.0
    routes: Mapping[str, Mapping] = field(default_factory=lambda: MappingProxyType({}))
    fallback_route: str = "operations"
    alertmanager_repost_seconds: float = 60.0
    public_url: str = ""
    http_timeout_seconds: float = 10.0
    business_rules: Mapping[str, Mapping] = field(default_factory=lambda: MappingProxyType({}))
    business_rules_seconds: float = 60.0

    def __post_init__(self) -> None:
        require_number(self.interval_seconds, "LEITSTAND_ALERT_INTERVAL_SECONDS", minimum=0.1)
        require_number(self.alertmanager_repost_seconds, "LEITSTAND_ALERTMANAGER_REPOST_SECONDS", minimum=1)
        require_number(self.http_timeout_seconds, 'LEITSTAND_NOTIFY["http_timeout_seconds"]', minimum=0.01)
        require_number(self.business_rules_seconds, "LEITSTAND_BUSINESS_RULES_SECONDS", minimum=1)
        if not self.fallback_route:
            raise OptionError("LEITSTAND_ALERT_FALLBACK_ROUTE must name a route")
        for setting, value in (("LEITSTAND_ALERTS", self.rules), ("LEITSTAND_BUSINESS_RULES", self.business_rules)):
            wrong = sorted(name for name, config in value.items() if not isinstance(config, Mapping))
            if wrong:
                raise OptionError(f"{setting}[{wrong[0]!r}] must be an object of the rule's options")
        # A route's own fields are checked with their limits by leitstand.E014.

    def rule_option(self, rule: str, key: str, scope: str = "", default=None):
        """A rule's setting, overridden for the scope when ``LEITSTAND_ALERTS[rule]["overrides"][scope]`` says so."""
        config = self.rules[rule]
        return config.get("overrides", {}).get(scope, {}).get(key, config.get(key, default))

    @classmethod
    def from_settings(cls, settings) -> AlertingOptions:
        if not isinstance(settings.LEITSTAND_ALERT_ROUTES, Mapping):
            raise OptionError("LEITSTAND_ALERT_ROUTES must be a JSON object: route name → its contacts")
        return cls(
            rules=_frozen(settings.LEITSTAND_ALERTS),
            interval_seconds=settings.LEITSTAND_ALERT_INTERVAL_SECONDS,
            routes=_frozen(settings.LEITSTAND_ALERT_ROUTES),
            fallback_route=settings.LEITSTAND_ALERT_FALLBACK_ROUTE,
            alertmanager_repost_seconds=settings.LEITSTAND_ALERTMANAGER_REPOST_SECONDS,
            public_url=settings.LEITSTAND_PUBLIC_URL,
            http_timeout_seconds=settings.LEITSTAND_NOTIFY["http_timeout_seconds"],
            business_rules=_frozen(settings.LEITSTAND_BUSINESS_RULES),
            business_rules_seconds=settings.LEITSTAND_BUSINESS_RULES_SECONDS,
        )


@dataclass(frozen=True)
class ConsoleOptions:
    snapshot_seconds: float = 5.0
    deadletters_seconds: float = 30.0
    quiet_source_hours: float = 24.0
    recheck_overdue_seconds: float = 600.0
    stuck_heartbeat_intervals: float = 3.0
    review_lease_seconds: float = 300.0
    rollup_days: float = 8.0
    metrics_token: str = ""
    metrics_allowed_ips: frozenset[str] = frozenset()
    trace_url: str = ""
    alerting: AlertingOptions = field(default_factory=AlertingOptions)
    retention: RetentionOptions = field(default_factory=RetentionOptions)

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
            alerting=AlertingOptions.from_settings(settings),
            retention=RetentionOptions.from_settings(settings),
        )


_current: ConsoleOptions | None = None


def configure(options: ConsoleOptions) -> None:
    global _current
    _current = options


def current() -> ConsoleOptions:
    if _current is None:
        raise RuntimeError(
            "the console's options are not configured yet (dashboard.apps.DashboardConfig.ready does it)"
        )
    return _current
