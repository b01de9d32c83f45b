"""The ``dispatcher`` sweep: every round, each unpaused pool with due work gets the wake-ups it lacks,
up to one per worker (more would only queue up); wake-ups already waiting in its queue count. A
broker that cannot be reached is reported once and the round sends nothing (the pools wake
themselves meanwhile: ``workers/runtime/supervisor/``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workers.runtime import dispatch, options
from workers.runtime.models import Pool
from workers.runtime.sweeps import Stage, register_unit


@dataclass(frozen=True)
class DispatchConfig:
    # Wake-ups a pool may have waiting at once: its workers (LEITSTAND_POOLS[pool]["workers"], checked
    # with the runtime's options).
    bounds: Mapping[str, int]
    every_seconds: float = 0.0

    @classmethod
    def from_options(cls, runtime: options.RuntimeOptions) -> DispatchConfig:
        return cls(bounds=runtime.pools)


def run_once(config: DispatchConfig) -> dict[str, int]:
    """Send the missing wake-ups; how many went to each pool (pools that needed none are left out)."""
    paused = set(Pool.objects.filter(is_paused=True).values_list("name", flat=True))
    try:
        waiting = dispatch.outstanding_wakeups()
    except dispatch.broker_errors() as unreachable:
        dispatch.broker_reachable(False, unreachable)
        return {}
    dispatch.broker_reachable(True)
    sent = {}
    for pool, bound in config.bounds.items():
        if pool in paused:
            continue
        missing = min(bound, dispatch.due_jobs(pool, cap=bound)) - waiting.get(pool, 0)
        if missing > 0:
            sent[pool] = dispatch.wakeup_send(pool, count=missing)
    return sent


def register() -> None:
    register_unit("dispatcher", run_once, DispatchConfig.from_options(options.current()), stage=Stage.DISPATCH)
