"""Whether a worker's next claim is "from the front": in a backlog, its claims move their flow lanes'
next due time past the jobs they took (``leases.claim(advance_lanes=True)``).

A claim walks each flow lane's entries in ``job_flow_idx`` (pool, priority, flow_key, due_at, id)
from the lane's next due time. Every job it claims leaves its entry there behind it, pointing at a
row version that is dead but that vacuum may remove only once no transaction can still see it.
While one long transaction lives on the primary — a report, a forgotten ``psql``, a backup
(``manage.py db backup`` for as long as the dump runs) — nothing is removed, and a walk from a next
due time that stayed where it was visits, in the table, every job claimed since that transaction
began: measured with ``bench.horizon`` on the claim before flow keys, a claim of 100 jobs went from
5 ms to 190 ms after four minutes, and the pool's throughput to a third.

So while the pool works through a backlog (the last claim filled its batch), a claim also reads its
lanes' next due time again after it (one more statement), and the next claim starts past what it
took. While whole walks are cheap (under ``CHEAP_WALK_SECONDS``, as they are when vacuum keeps up),
this is done only in a backlog, and a claim from the front that comes back short is followed by a
plain claim at once; once a plain claim is expensive, claims are from the front whatever they find,
and a plain one runs only every ``WALK_SECONDS`` or, when they take longer, as seldom as keeps them to
``WALK_SHARE`` of the time. A job that goes back into line behind a lane's next due time lowers it
(jobs/functions.sql, ``jobs_flow_lanes_touch``): it is found by the next claim either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from jobs.leases import ClaimedJob

CHEAP_WALK_SECONDS = 0.02  # a whole walk (with its claim) that takes less is cheap: about 6 ms in steady state
WALK_SECONDS = 2.0  # the longest a job behind the front waits for a whole walk, while walks are short
WALK_SHARE = 0.05  # whole walks take at most this share of the time, however long they get


class ClaimFront:
    """One per worker and pool; a hint only: what it skips is found by the next whole walk."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.due_at: datetime | None = None  # the oldest due time the last claim that found jobs took
        self.full = False  # whether the last claim filled its batch
        self.walk_seconds = 0.0  # how long the last whole walk took
        self.next_walk_at = 0.0  # the monotonic time from which the next claim walks the whole line

    def claim(self, take: Callable[[int, datetime | None], list[ClaimedJob]], limit: int) -> list[ClaimedJob]:
        """Up to ``limit`` jobs through ``take(limit, due_from)``, from the front or the whole line."""
        cheap = self.walk_seconds < CHEAP_WALK_SECONDS
        if self.due_at is None or self.clock() >= self.next_walk_at or (cheap and not self.full):
            claimed = self._walk(take, limit)
        else:
            claimed = take(limit, self.due_at)
            if len(claimed) < limit and cheap:  # nothing more from the front on: what is behind it next
                claimed += self._walk(take, limit - len(claimed))
        self.full = len(claimed) >= limit
        if claimed:  # an empty line leaves the front where it was: nothing due before it came back
            self.due_at = min(job.due_at for job in claimed)
        return claimed

    def _walk(self, take: Callable[[int, datetime | None], list[ClaimedJob]], limit: int) -> list[ClaimedJob]:
        began = self.clock()
        claimed = take(limit, None)
        self.walk_seconds = self.clock() - began
        self.next_walk_at = began + max(WALK_SECONDS, self.walk_seconds / WALK_SHARE)
        return claimed
