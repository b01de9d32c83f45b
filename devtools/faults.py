"""The fault drills' shared vocabulary: what each drill does to the system, and one verdict on what
the jobs it disturbed went through.

Two drills use it: ``bench/fault_drill.py`` kills processes of one host at random under load (the
process faults), ``manage.py cluster drill`` (``devtools/cluster.py``) cuts, kills and restarts whole
hosts and servers of a cluster of network namespaces (the host faults). Both end with the same
question, asked by the same statement: of the jobs they submitted, was any lost, is any still open,
did any effect go missing, apply twice, or get reported by another attempt than the one that applied
it? The drills' synthetic jobs (``workers/runtime/synthetic.py``) apply one ledger effect and report
the attempt that applied it in their result (``…:effect-by-attempt-N``), which makes the last one
checkable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# What bench/fault_drill.py does to one host's processes, drawn at random every few seconds.
IDLE_WORKER = "idle worker"
BUSY_WORKER = "busy worker"
EVERY_WORKER = "every worker"
PUSHER = "pusher"
MONITOR = "monitor"
SUPERVISOR = "supervisor"
POOL_MAIN = "pool main process"
CONTROL = "control process"
FROZEN_WORKER = "SIGSTOP past the lease"
DATABASE_RESTART = "database restart"
PROCESS_FAULTS = (
    IDLE_WORKER,
    BUSY_WORKER,
    EVERY_WORKER,
    PUSHER,
    MONITOR,
    SUPERVISOR,
    POOL_MAIN,
    CONTROL,
    FROZEN_WORKER,
    DATABASE_RESTART,
)

# What the cluster drill does between hosts, one after the other.
PARTITION_WORKER_HOST = "partition a worker host"
PARTITION_LEADER_HOST = "partition the leader's host"
KILL_HOST = "kill -9 a host"
PGBOUNCER_RESTART = "restart pgbouncer"
POSTGRES_RESTART = "restart postgresql (immediate)"
HOST_FAULTS = (PARTITION_WORKER_HOST, PARTITION_LEADER_HOST, KILL_HOST, PGBOUNCER_RESTART, POSTGRES_RESTART)

# A job in one of these states is over: it waits for nothing more.
TERMINAL_STATES = ("result_stored", "done", "dead", "cancelled")


@dataclass
class Fault:
    """One fault as it struck: its kind, when (database time), and the attempts its victims held."""

    kind: str
    at: float
    held: list[tuple[str, int]] = field(default_factory=list)  # (job id, lease version)


# The drills count straight from the engine's tables (devtools/ stands outside the SQL layer's rule:
# a drill checks the engine, it does not use it).
VERDICT_SQL = """
SELECT count(*),
       count(*) FILTER (WHERE NOT j.state = ANY(%(terminal)s)),
       count(*) FILTER (WHERE j.state NOT IN ('result_stored', 'done')),
       coalesce(sum(e.applied), 0),
       count(*) FILTER (WHERE j.state IN ('result_stored', 'done') AND coalesce(e.applied, 0) = 0),
       count(*) FILTER (WHERE e.applied > 1),
       count(*) FILTER (WHERE e.applied = 1 AND j.result_ref NOT LIKE '%%:effect-by-attempt-' || e.attempt),
       (SELECT count(*) FROM jobs_stalewrite s JOIN jobs_job k ON k.id = s.job_id
        WHERE k.correlation_id = ANY(%(correlations)s))
FROM jobs_job j
LEFT JOIN (SELECT job_id, count(*) AS applied, max(lease_version) AS attempt FROM jobs_effect GROUP BY job_id)
     AS e ON e.job_id = j.id
WHERE j.correlation_id = ANY(%(correlations)s)
"""


@dataclass(frozen=True)
class Verdict:
    """What the jobs of a drill went through, counted once they had time to end."""

    submitted: int
    jobs: int  # stored
    still_open: int  # stored, but by the end neither ended nor waiting for anything
    not_completed: int  # ended otherwise than completed (dead, cancelled) or still open
    effects: int  # effects applied, in all
    effects_missing: int  # completed without an effect
    effects_duplicated: int  # more than one effect
    effects_misreported: int  # the result names another attempt than the one that applied the effect
    stale_writes_refused: int

    @property
    def lost(self) -> int:
        """Never stored, or stored and never ended."""
        return self.submitted - self.jobs + self.still_open

    def failures(self) -> list[str]:
        """What went wrong (none: the system held)."""
        checks = {
            "jobs were lost": self.lost,
            "completed jobs have no effect": self.effects_missing,
            "jobs have more than one effect": self.effects_duplicated,
            "results name another attempt than the one that applied the effect": self.effects_misreported,
        }
        return [f"{why} ({count})" for why, count in checks.items() if count]


def verdict(query: Callable[[str, dict], Sequence[tuple]], *, correlations: list[str], submitted: int) -> Verdict:
    """The verdict on the jobs of ``correlations`` (``submitted`` of them were sent), through
    ``query(statement, parameters)``: a drill's own connection, a Django cursor or the cluster's."""
    (row,) = query(VERDICT_SQL, {"correlations": correlations, "terminal": list(TERMINAL_STATES)})
    return Verdict(submitted, *row)
