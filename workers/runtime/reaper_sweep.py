"""The ``reaper`` sweep, every round: leases that expired more than ``LEITSTAND_LEASE_GRACE_SECONDS``
ago (database time) are released. The lost attempt counts against the job's retry budget, with its
type's retry policy (a fallback policy for a type no longer registered): it waits for its next
attempt, or goes to the dead-letter queue. The old attempt's next write is refused as stale."""

from __future__ import annotations

from dataclasses import dataclass

from jobs import leases, reads
from jobs.retry import FALLBACK_POLICY
from workers.runtime import options
from workers.runtime.pace import Pace
from workers.runtime.registry import registry
from workers.runtime.sweeps import Stage, register_unit


@dataclass(frozen=True)
class ReaperConfig:
    grace_seconds: float  # checked with the runtime's options (LEITSTAND_LEASE_GRACE_SECONDS)
    every_seconds: float = 0.0

    @classmethod
    def from_options(cls, runtime: options.RuntimeOptions) -> ReaperConfig:
        return cls(grace_seconds=runtime.lease_grace_seconds)


# The walk of the leased set, paced while it is expensive (workers/runtime/pace.py).
_pace = Pace()


def run_once(config: ReaperConfig) -> int:
    """Release the expired leases, type by type; how many. One walk of the leased set finds the types
    that have any (usually none): a walk per registered type cost ten times that, and under a long
    transaction elsewhere each walk visits a dead entry of every job leased meanwhile."""
    if not _pace.ready():
        return 0
    grace = config.grace_seconds
    with _pace.timed():
        expired = {job_type for (job_type,) in reads.rows("expired_lease_types", grace=grace)}
    types = {t.name: t for t in registry.all() if t.name in expired}
    reaped = sum(len(leases.reap_expired(grace_seconds=grace, policy=t.retry, job_type=t.name)) for t in types.values())
    if expired - set(types):  # a type no longer registered: the fallback policy, for whatever is left
        reaped += len(leases.reap_expired(grace_seconds=grace, policy=FALLBACK_POLICY))
    return reaped


def register() -> None:
    register_unit("reaper", run_once, ReaperConfig.from_options(options.current()), stage=Stage.ENGINE)
