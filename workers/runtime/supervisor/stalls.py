"""Liveness means progress: the stall watch of one pool's supervisor.

A wake-up that went missing (or a wake-up broker that is away) costs one sweep interval: with due
work, idle workers and no claim for ``wake_after_seconds`` (``LEITSTAND_CONTROL_INTERVAL_SECONDS``)
the watch asks the sentinel to wake its idle workers. A pool with due work, an idle worker and no
claim for ``stall_seconds`` (``LEITSTAND_POOL_STALL_SECONDS``) is stalled: the watch asks for a
wake-up first (the wake-ups may be what went missing), then for a restart of the idle workers and
the pusher, and when that does not help either it records the stall on the pool's row, where the
``pool_stalled`` alert finds it, and keeps asking for wake-ups. The next claim clears it.

The watch decides; the sentinel, which owns the processes, acts (``Heal``).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
from django import db
from django.db import Error as DatabaseError

from jobs import reads
from jobs.models import LeitstandNow
from workers.runtime import lifecycle
from workers.runtime.models import Pool
from workers.runtime.supervisor.database import bounded

logger = logging.getLogger("leitstand.supervisor")


class Heal(enum.Enum):
    NONE = "none"
    WAKE = "wake"  # hand the idle workers a wake-up
    RESTART = "restart"  # restart the idle workers and the pusher, then wake them


@dataclass
class _Progress:
    """What the watch knows: when work was last claimed, since when work is due, what it tried."""

    claimed_at: float
    due_since: float | None = None
    heals: int = 0
    recorded: bool = False


@dataclass
class StallWatch:
    pool_name: str
    host: str
    identity: str  # host:pid of this supervisor, written on the pool's row with a stall
    stall_seconds: float
    wake_after_seconds: float
    clock: Callable[[], float] = time.monotonic
    progress: _Progress = field(init=False)

    def __post_init__(self) -> None:
        self.progress = _Progress(claimed_at=self.clock())

    def claimed(self) -> None:
        """A worker of the pool claimed work: the pool progresses, a recorded stall is cleared."""
        self.progress.claimed_at = self.clock()
        self.progress.heals = 0
        if self.progress.recorded:
            self._record(None)

    def check(self, idle: int) -> Heal:
        """One look (one indexed query), given how many workers are idle."""
        try:
            with bounded():
                has_due, is_paused = reads.row("pool_has_due_work", pool=self.pool_name)
        except DatabaseError:
            db.connections.close_all()  # a database outage is not a stall of this pool
            return Heal.NONE
        now = self.clock()
        progress = self.progress
        if is_paused or not has_due or lifecycle.is_draining():
            progress.due_since, progress.heals = None, 0
            if progress.recorded and not has_due:
                self._record(None)
            return Heal.NONE
        if progress.due_since is None:
            progress.due_since = now
        quiet = now - max(progress.claimed_at, progress.due_since)
        if quiet < self.stall_seconds or not idle:
            # Claiming, or every worker is busy (each bounded by its time limit); or a wake-up went
            # missing (or its broker is away): that costs one sweep interval.
            return Heal.WAKE if idle and quiet >= self.wake_after_seconds else Heal.NONE
        progress.heals += 1
        progress.due_since = now  # each healing step gets a window of its own
        if progress.heals == 1:
            logger.warning(
                "pool %s: due work and %d idle workers, no claim for %.0f s; waking them", self.pool_name, idle, quiet
            )
            return Heal.WAKE
        if progress.heals == 2:
            logger.critical(
                "pool %s: still no claim after waking its workers; restarting %d idle workers and the pusher",
                self.pool_name,
                idle,
            )
            return Heal.RESTART
        if not progress.recorded:
            # Restarting again would only churn processes: report, and keep waking the workers.
            self._record(
                f"due work, {idle} idle workers and no claim for "
                f"{self.stall_seconds * progress.heals:.0f} s on {self.host}, through 2 healing steps "
                "(wake-ups, then restarted workers and pusher)"
            )
        return Heal.WAKE

    def clear_stale(self) -> None:
        """A stall reported by an earlier supervisor of this host that is gone would never clear."""
        try:
            with bounded():
                for pool in Pool.objects.filter(name=self.pool_name, stalled_on__startswith=f"{self.host}:"):
                    pid = pool.stalled_on.rsplit(":", 1)[1]
                    if not pid.isdigit() or not psutil.pid_exists(int(pid)):
                        Pool.objects.filter(pk=pool.pk, stalled_on=pool.stalled_on).update(
                            stalled_since=None, stalled_on="", stall_note=""
                        )
        except DatabaseError:
            db.connections.close_all()

    def _record(self, note: str | None) -> None:
        """Record the stall on the pool's row (None: clear this supervisor's record of it)."""
        try:
            with bounded():
                self._write(note)
            self.progress.recorded = note is not None
        except DatabaseError:
            db.connections.close_all()

    def _write(self, note: str | None) -> None:
        if note is None:
            if Pool.objects.filter(name=self.pool_name, stalled_on=self.identity).update(
                stalled_since=None, stalled_on="", stall_note=""
            ):
                logger.warning("pool %s: claiming again; stall cleared", self.pool_name)
        elif Pool.objects.filter(name=self.pool_name, stalled_since__isnull=True).update(
            stalled_since=LeitstandNow(), stalled_on=self.identity, stall_note=note[:500]
        ):
            logger.critical("pool %s: stalled: %s", self.pool_name, note)
        else:
            logger.critical("pool %s: stalled (another supervisor reported it first): %s", self.pool_name, note)
