"""The ``path-checks`` sweep, every round: ended attempts are checked against their type's expected
paths and timing (``jobs/paths.py``); of the checked jobs, a share is sampled for a shadow run of
another handler version (``LEITSTAND_SHADOW_SAMPLES``, ``workers/runtime/replay.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.paths import attempts_check
from workers.runtime.registry import registry
from workers.runtime.replay import shadow_sample
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class PathCheckConfig:
    limit: int = 1000
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require_number(self.limit, "the path-checks sweep's limit", minimum=1, whole=True)


def run_once(config: PathCheckConfig) -> dict[str, int]:
    """Check the ended attempts; how many, and how many shadow jobs were sampled from them."""
    checked = attempts_check({t.name: t.paths for t in registry.all()}, limit=config.limit)
    return {"checked": len(checked), "shadow_jobs": shadow_sample(checked)}


def register() -> None:
    register_unit("path-checks", run_once, PathCheckConfig(), stage=Stage.OBSERVE)
