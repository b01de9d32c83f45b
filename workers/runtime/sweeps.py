"""The sweeps the control process runs: registered by the apps that own them, never imported by it.

A sweep is a function without arguments that the leading control process calls every round (or at
most every ``every_seconds``). Apps register theirs in ``AppConfig.ready()``; the control loop runs
them in the order of their ``stage``, then of registration, so work planned in a round is dispatched
in the same round:

| stage | what runs there |
| --- | --- |
| ``ENGINE`` | the engine's own upkeep: reaper, due retries, unclear jobs to review |
| ``PLAN`` | sweeps that create jobs: the recheck planner, bulk operations, the webhook outbox |
| ``DISPATCH`` | waking the pools that have due work |
| ``OBSERVE`` | sweeps that read what happened: batches, path checks, snapshots, rules, alerts |

**A sweep as a unit** (``register_unit``): a module of its own with a frozen config (its settings
read once, at registration, with defaults, and checked there: ``require`` names the setting to mend),
a ``run_once(config)`` that returns what it did, and a test file named after it. Every sweep is one:
the modules named ``*_sweep.py`` here, in ``workers/pipeline/``, ``rechecks/`` and
``dashboard/operations/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured

from jobs.options import OptionError, require_number  # noqa: F401 (re-exported: a config's check of a number)


class Stage(IntEnum):
    ENGINE = 10
    PLAN = 20
    DISPATCH = 30
    OBSERVE = 40


@dataclass
class Sweep:
    name: str
    function: Callable[[], object]
    stage: Stage
    every_seconds: float = 0.0
    # True: the control loop runs it in one transaction fenced by the leader's term; False: it
    # commits as it goes and fences each of its write transactions itself (jobs.leadership.fenced).
    fenced: bool = True
    _last: float = field(default=0.0, repr=False)

    def due(self) -> bool:
        return not self.every_seconds or time.monotonic() - self._last >= self.every_seconds

    def __call__(self) -> object:
        """Run the sweep, or return ``None`` when it ran less than ``every_seconds`` ago."""
        if not self.due():
            return None
        if self.every_seconds:
            self._last = time.monotonic()
        return self.function()


class Sweeps:
    def __init__(self) -> None:
        self._sweeps: dict[str, Sweep] = {}

    def register(
        self,
        name: str,
        function: Callable[[], object],
        *,
        stage: Stage,
        every_seconds: float = 0.0,
        fenced: bool = True,
    ) -> Sweep:
        if name in self._sweeps:
            raise ImproperlyConfigured(f"sweep {name!r} is registered twice")
        if not callable(function):
            raise ImproperlyConfigured(f"sweep {name!r}: function must be callable")
        sweep = Sweep(name=name, function=function, stage=Stage(stage), every_seconds=every_seconds, fenced=fenced)
        self._sweeps[name] = sweep
        return sweep

    def get(self, name: str) -> Sweep:
        return self._sweeps[name]

    def in_order(self) -> list[Sweep]:
        registered = list(self._sweeps.values())
        return sorted(registered, key=lambda sweep: (sweep.stage, registered.index(sweep)))


sweeps = Sweeps()
register_sweep = sweeps.register


def require(condition: bool, setting: str, message: str) -> None:
    """A sweep config's check, at registration: a refusal names the setting to mend."""
    if not condition:
        raise OptionError(f"{setting} {message}")


class SweepConfig(Protocol):
    every_seconds: float  # 0: every round


def register_unit(
    name: str, run_once: Callable[[SweepConfig], object], config: SweepConfig, *, stage: Stage, fenced: bool = True
) -> Sweep:
    """Register a sweep unit: ``run_once`` with its config, read and checked by the caller once."""
    return register_sweep(
        name, partial(run_once, config), stage=stage, every_seconds=config.every_seconds, fenced=fenced
    )
