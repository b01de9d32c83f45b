"""The runtime's settings, declared once, typed and checked here: Django's settings are read at
start-up (``workers/apps.py``, again when a test overrides one) into ``RuntimeOptions`` and handed to
the pools, the supervisor, the control loop and the sweeps through ``current()``; nothing else in
workers/runtime/ reads ``django.conf`` (tests/runtime/test_options.py keeps it so, as for jobs/).

| setting | option |
| --- | --- |
| ``LEITSTAND_POOLS`` | ``pools``: each pool's workers; ``in_flight``: the jobs each worker runs at once |
| ``LEITSTAND_LEASE_GRACE_SECONDS`` | ``lease_grace_seconds``: how long past its lease a job is reaped |
| ``LEITSTAND_CONTROL_INTERVAL_SECONDS``, ``_LEADER_LEASE_SECONDS`` | ``control_interval_seconds``, ``control_leader_lease_seconds`` |
| ``LEITSTAND_WAKEUP_REDIS_URL`` | ``wakeup_redis_url``: wake-ups through Redis instead of PostgreSQL |
| ``LEITSTAND_TASKS_ONLY`` | ``tasks_only``: a tasks pool without the broker (it wakes itself) |
| ``LEITSTAND_BATCH_BUDGET_SECONDS``, ``LEITSTAND_MAX_BATCH`` | ``batch_budget_seconds``, ``max_batch``: a claimed batch's size |
| ``LEITSTAND_WAKEUP_BUDGET_SECONDS`` | ``wakeup_budget_seconds``: how long one wake-up claims batches |
| ``LEITSTAND_POOL_SHUTDOWN_SECONDS``, ``_STALL_SECONDS`` | ``pool_shutdown_seconds``, ``pool_stall_seconds`` |
| ``LEITSTAND_POISON_DEATHS`` | ``poison_deaths``: worker deaths that quarantine a job |
| ``LEITSTAND_DEFERRED_LIFE_HOURS`` | ``deferred_life_hours``: how long a deferred effect is kept |
| ``LEITSTAND_RUN_DIR``, ``BASE_DIR`` | ``run_dir`` (drain markers), ``base_dir`` (the disk a pool reports) |
| ``LEITSTAND_SHADOW_SAMPLES`` | ``shadow_samples``: type → version and share (checked against the types: E010) |
| ``LEITSTAND_PIPELINE``, ``LEITSTAND_NOTIFY``, ``LEITSTAND_SYNTHETIC`` | ``pipeline``, ``notify``, ``synthetic``: timing of those types |
| ``LEITSTAND_FETCH["total_seconds"]`` | ``fetch_total_seconds``: the longest external call of a pipeline job |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from jobs.options import Current, OptionError, require_number

SETTINGS = (
    "LEITSTAND_POOLS",
    "LEITSTAND_LEASE_GRACE_SECONDS",
    "LEITSTAND_CONTROL_INTERVAL_SECONDS",
    "LEITSTAND_CONTROL_LEADER_LEASE_SECONDS",
    "LEITSTAND_WAKEUP_REDIS_URL",
    "LEITSTAND_BATCH_BUDGET_SECONDS",
    "LEITSTAND_MAX_BATCH",
    "LEITSTAND_WAKEUP_BUDGET_SECONDS",
    "LEITSTAND_POOL_SHUTDOWN_SECONDS",
    "LEITSTAND_POOL_STALL_SECONDS",
    "LEITSTAND_POISON_DEATHS",
    "LEITSTAND_DEFERRED_LIFE_HOURS",
    "LEITSTAND_RUN_DIR",
    "BASE_DIR",
    "LEITSTAND_SHADOW_SAMPLES",
    "LEITSTAND_PIPELINE",
    "LEITSTAND_NOTIFY",
    "LEITSTAND_SYNTHETIC",
    "LEITSTAND_FETCH",
)


@dataclass(frozen=True)
class Timing:
    """The timing of a family of job types; ``setting`` names the dictionary it was read from."""

    setting: str
    timeout_seconds: float
    lease_seconds: float
    heartbeat_seconds: float
    max_attempts: int
    http_timeout_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("timeout_seconds", "lease_seconds", "heartbeat_seconds"):
            require_number(getattr(self, name), f'{self.setting}["{name}"]', minimum=0.01)
        require_number(self.max_attempts, f'{self.setting}["max_attempts"]', minimum=1, whole=True)
        if self.http_timeout_seconds is not None:
            require_number(self.http_timeout_seconds, f'{self.setting}["http_timeout_seconds"]', minimum=0.01)

    @classmethod
    def from_setting(cls, setting: str, values: Mapping) -> Timing:
        return cls(
            setting=setting,
            timeout_seconds=values["timeout_seconds"],
            lease_seconds=values["lease_seconds"],
            heartbeat_seconds=values["heartbeat_seconds"],
            max_attempts=values["max_attempts"],
            http_timeout_seconds=values.get("http_timeout_seconds"),
        )


@dataclass(frozen=True)
class RuntimeOptions:
    pools: Mapping[str, int]  # pool → workers
    pipeline: Timing
    notify: Timing
    synthetic: Timing
    run_dir: Path
    base_dir: Path
    fetch_total_seconds: float
    lease_grace_seconds: float
    control_interval_seconds: float
    control_leader_lease_seconds: float
    wakeup_redis_url: str
    tasks_only: bool
    batch_budget_seconds: float
    max_batch: int
    wakeup_budget_seconds: float
    pool_shutdown_seconds: float
    pool_stall_seconds: float
    poison_deaths: int
    deferred_life_hours: float
    shadow_samples: Mapping[str, Mapping]
    # pool → jobs one worker process runs at once (threads; network-bound pools); a pool not named: 1
    in_flight: Mapping[str, int]

    def __post_init__(self) -> None:
        if not self.pools:
            raise OptionError("LEITSTAND_POOLS names no pool")
        for pool, workers in self.pools.items():
            require_number(workers, f'LEITSTAND_POOLS["{pool}"]["workers"]', minimum=1, whole=True)
        for pool, jobs in self.in_flight.items():
            require_number(jobs, f'LEITSTAND_POOLS["{pool}"]["in_flight"]', minimum=1, whole=True)
        require_number(self.fetch_total_seconds, 'LEITSTAND_FETCH["total_seconds"]', minimum=0.01)
        require_number(self.lease_grace_seconds, "LEITSTAND_LEASE_GRACE_SECONDS", minimum=0)
        require_number(self.control_interval_seconds, "LEITSTAND_CONTROL_INTERVAL_SECONDS", minimum=0.01)
        require_number(self.control_leader_lease_seconds, "LEITSTAND_CONTROL_LEADER_LEASE_SECONDS", minimum=1)
        require_number(self.batch_budget_seconds, "LEITSTAND_BATCH_BUDGET_SECONDS", minimum=0.01)
        require_number(self.max_batch, "LEITSTAND_MAX_BATCH", minimum=1, whole=True)
        require_number(self.wakeup_budget_seconds, "LEITSTAND_WAKEUP_BUDGET_SECONDS", minimum=0.01)
        require_number(self.pool_shutdown_seconds, "LEITSTAND_POOL_SHUTDOWN_SECONDS", minimum=1)
        require_number(self.pool_stall_seconds, "LEITSTAND_POOL_STALL_SECONDS", minimum=0.1)
        require_number(self.poison_deaths, "LEITSTAND_POISON_DEATHS", minimum=2, whole=True)
        require_number(self.deferred_life_hours, "LEITSTAND_DEFERRED_LIFE_HOURS", minimum=0.01)

    def pool_refusal(self, pool: object) -> str | None:
        """Why ``pool`` cannot be named (the text of the caller's ``JobInputError``), or ``None``."""
        if isinstance(pool, str) and pool in self.pools:
            return None
        return f"unknown pool {pool!r}; pools: {', '.join(self.pools)}"

    @classmethod
    def from_settings(cls, settings) -> RuntimeOptions:
        """From Django's settings object (the caller's: workers/runtime/ does not import django.conf)."""
        if not isinstance(settings.LEITSTAND_SHADOW_SAMPLES, Mapping):
            # Each sample's version and share are checked against the registered types (leitstand.E010).
            raise OptionError("LEITSTAND_SHADOW_SAMPLES must be a JSON object: type → {version, share}")
        return cls(
            pools=MappingProxyType({pool: config["workers"] for pool, config in settings.LEITSTAND_POOLS.items()}),
            pipeline=Timing.from_setting("LEITSTAND_PIPELINE", settings.LEITSTAND_PIPELINE),
            notify=Timing.from_setting("LEITSTAND_NOTIFY", settings.LEITSTAND_NOTIFY),
            synthetic=Timing.from_setting("LEITSTAND_SYNTHETIC", settings.LEITSTAND_SYNTHETIC),
            fetch_total_seconds=settings.LEITSTAND_FETCH["total_seconds"],
            lease_grace_seconds=settings.LEITSTAND_LEASE_GRACE_SECONDS,
            control_interval_seconds=settings.LEITSTAND_CONTROL_INTERVAL_SECONDS,
            control_leader_lease_seconds=settings.LEITSTAND_CONTROL_LEADER_LEASE_SECONDS,
            wakeup_redis_url=settings.LEITSTAND_WAKEUP_REDIS_URL,
            tasks_only=settings.TASKS_ONLY,
            batch_budget_seconds=settings.LEITSTAND_BATCH_BUDGET_SECONDS,
            max_batch=settings.LEITSTAND_MAX_BATCH,
            wakeup_budget_seconds=settings.LEITSTAND_WAKEUP_BUDGET_SECONDS,
            pool_shutdown_seconds=settings.LEITSTAND_POOL_SHUTDOWN_SECONDS,
            pool_stall_seconds=settings.LEITSTAND_POOL_STALL_SECONDS,
            poison_deaths=settings.LEITSTAND_POISON_DEATHS,
            deferred_life_hours=settings.LEITSTAND_DEFERRED_LIFE_HOURS,
            run_dir=Path(settings.LEITSTAND_RUN_DIR),
            base_dir=Path(settings.BASE_DIR),
            shadow_samples=MappingProxyType(dict(settings.LEITSTAND_SHADOW_SAMPLES)),
            in_flight=MappingProxyType(
                {
                    pool: config["in_flight"]
                    for pool, config in settings.LEITSTAND_POOLS.items()
                    if "in_flight" in config
                }
            ),
        )


_options: Current[RuntimeOptions] = Current("the runtime's", "workers.apps.WorkersConfig.ready")
configure, current = _options.configure, _options.get
