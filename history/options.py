"""The history's settings, typed and checked here: read at start-up (``history/apps.py``, again when a
test overrides one) into ``RetentionOptions`` and handed to retention, the archive and the partitions
through ``current()``.

| setting | option |
| --- | --- |
| ``LEITSTAND_RETENTION[…]`` (``LEITSTAND_RETENTION_*``, ``LEITSTAND_PARTITION_*``) | ``<key>`` |
| ``LEITSTAND_ARCHIVE_DIR``, ``LEITSTAND_DATABASE_MAINTENANCE_URL`` | ``archive_dir``, ``maintenance_url`` |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from jobs.options import Current, OptionError, frozen, require_number

SETTINGS = ("LEITSTAND_RETENTION", "LEITSTAND_ARCHIVE_DIR", "LEITSTAND_DATABASE_MAINTENANCE_URL")

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

    archive_dir: Path
    maintenance_url: str
    enabled: bool
    days: Mapping[str, float]
    # Per job type, days per ended state; which types exist is checked with the registry (leitstand.E012).
    types: Mapping[str, Mapping[str, float]]
    finding_days: float
    plan_days: float
    batch_days: float
    alert_days: float
    login_log_days: float
    task_days: float
    audit_days: float
    archive_index_days: float
    partition_days_ahead: int
    partition_keep_days: int
    trees_per_round: int
    jobs_per_file: int
    seconds_per_round: float
    every_seconds: float

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
            days=frozen(retention.pop("days")),
            # A malformed override is left to the system check, which names the registered types.
            types=frozen(types) if isinstance(types, Mapping) else MappingProxyType({}),
            **retention,
        )


_options: Current[RetentionOptions] = Current("the history's", "history.apps.HistoryConfig.ready")
configure, current = _options.configure, _options.get
