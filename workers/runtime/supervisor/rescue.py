"""Handing back the jobs of a pool's dead workers on this host, at once instead of after their leases.

A first death keeps the job's place in line, repeated deaths mark a suspected poison job
(``leases.rescue_from_dead_worker``). The rescuer hands back the jobs of the workers its sentinel
saw die, and of those nobody saw die (``orphans``); while the database is away it keeps what it
could not hand back and tries again each round (``retry``).
"""

from __future__ import annotations

import logging

import psutil
from django import db
from django.db import Error as DatabaseError

from jobs import leases, logs, reads
from jobs.models import LeitstandNow
from jobs.retry import FALLBACK_POLICY
from workers.runtime import options
from workers.runtime.models import WorkerProcess
from workers.runtime.pace import Pace
from workers.runtime.registry import registry
from workers.runtime.supervisor.database import bounded

logger = logging.getLogger("leitstand.supervisor")


class Rescuer:
    """The dead workers of pool ``pool_name`` on host ``host``. Each call returns how many jobs it
    handed back, so its caller can wake idle workers for them."""

    def __init__(self, pool_name: str, host: str) -> None:
        self.pool_name, self.host = pool_name, host
        self.unrescued: list[tuple] = []  # (pid, reason, running) of dead workers whose jobs wait for the database
        self.orphans_pace = Pace()  # the look for orphans walks the leased set (workers/runtime/pace.py)
        # The database away: said once, then backed off, and when it is back (not once per round).
        self.outage = logs.Outage(logger, f"pool {pool_name}: handing back dead workers' jobs")

    def rescue(self, pid: int, reason: str, *, running=True) -> int:
        """``running``: the job whose handler ran when it died (None: none; True: not known)."""
        rescued = self._try(pid, reason, running)
        if rescued is None:
            self.unrescued.append((pid, reason, running))  # the database is away: again next round
        return rescued or 0

    def retry(self, live_pids: set[int]) -> int:
        """Try again for those the database refused; ``live_pids``: the sentinel's own workers."""
        handed_back, waiting = 0, []
        for pid, reason, running in self.unrescued:
            # A pid may have been reused by now (a long database outage): then the reaper takes over.
            if pid in live_pids or psutil.pid_exists(pid):
                continue
            rescued = self._try(pid, reason, running)
            if rescued is None:
                waiting.append((pid, reason, running))
            handed_back += rescued or 0
        self.unrescued = waiting
        return handed_back

    def orphans(self, live_pids: set[int]) -> int:
        """Hand back the jobs of this host's workers of this pool that are gone although nobody saw
        them die: the children of a supervisor that was killed, or of an earlier run of this pool
        that crashed. A worker counts as gone when no process has its pid here and its jobs missed
        two heartbeats; a live worker of another PID namespace with the same host name heartbeats,
        so it is never taken for gone. Otherwise only the reaper would find them, after lease + grace."""
        if not self.orphans_pace.ready():
            return 0
        silent = 2 * max((t.heartbeat_seconds for t in registry.for_pool(self.pool_name)), default=10.0)
        try:
            with self.orphans_pace.timed(), bounded():
                owners = [owner for (owner,) in reads.rows("lease_owners_silent", host=f"{self.host}:", silent=silent)]
        except DatabaseError:
            db.connections.close_all()
            return 0
        handed_back = 0
        for owner in owners:
            pid_text = owner[len(self.host) + 1 : -len(self.pool_name) - 1]
            if not owner.endswith(f"/{self.pool_name}") or not pid_text.isdigit():
                continue  # another pool's, or another host whose name starts like this one's
            pid = int(pid_text)
            if pid not in live_pids and not psutil.pid_exists(pid):
                reason = f"worker {self.host}:{pid} is gone (no such process, no heartbeat for {silent:g} s)"
                handed_back += self.rescue(pid, reason)
        return handed_back

    def stopped(self, pid: int, reason: str) -> None:
        """A worker that ended as asked: its registry row says so at once (consoles and alerts count
        live rows). Should the database be away, the row goes quiet and ages out instead."""
        try:
            with bounded():
                self._registry_stopped(pid, reason)
        except DatabaseError:
            db.connections.close_all()

    def _try(self, pid: int, reason: str, running) -> int | None:
        """How many jobs of the worker were handed back; None: the database is away."""
        owner = leases.WorkerIdentity(self.host, pid, self.pool_name).lease_owner
        poison = options.current().poison_deaths
        try:
            with bounded():
                rescued = [
                    r
                    for t in registry.for_pool(self.pool_name)
                    for r in leases.rescue_from_dead_worker(
                        lease_owner=owner,
                        reason=reason,
                        policy=t.retry,
                        poison_deaths=poison,
                        running=running,
                        job_type=t.name,
                    )
                ]
                rescued += leases.rescue_from_dead_worker(
                    lease_owner=owner, reason=reason, policy=FALLBACK_POLICY, poison_deaths=poison, running=running
                )
                self._registry_stopped(pid, reason)
        except DatabaseError as away:
            self.outage.failed(away)
            db.connections.close_all()
            return None
        self.outage.succeeded()
        if rescued:
            logger.warning(
                "pool %s: handed back %d jobs of %s: %s",
                self.pool_name,
                len(rescued),
                owner,
                ", ".join(f"{r.job_id} → {r.to_state}" for r in rescued),
            )
        return len(rescued)

    def _registry_stopped(self, pid: int, reason: str) -> None:
        WorkerProcess.objects.filter(host=self.host, pid=pid, pool=self.pool_name, stopped_at__isnull=True).update(
            stopped_at=LeitstandNow(), stop_reason=reason[:255]
        )
