"""Where the front of a pool's line was, so that a worker's next claim starts there.

The claim walks ``job_claim_idx`` (pool, priority, due_at, id) from its most urgent, oldest entry.
Every job it claims leaves its entry there behind it, pointing at a row version that is dead but
that vacuum may remove only once no transaction can still see it. While one long transaction lives
on the primary — a report, a forgotten ``psql``, a backup (``manage.py db backup`` for as long as
the dump runs) — nothing is removed, and each claim walks, and visits in the table, every job
claimed since that transaction began: measured with ``bench.horizon``, a claim of 100 jobs went from
5 ms to 190 ms after four minutes, and the pool's throughput to a third.

So a worker's claim may look only at jobs due at or after the front its last claim found
(``leases.claim(due_from=…)``): the entries before it are passed over inside the index. While whole
walks are cheap (under ``CHEAP_WALK_SECONDS``, as they are when vacuum keeps up), this is done only
in a backlog (the last claim filled its batch), and a claim from the front that comes back short is
followed by a whole walk at once (a lane ran dry: an older job of a less urgent lane is next) — the
usual path is unchanged. Once a whole walk is expensive, claims start at the front whatever they
find, and the whole line is walked only every ``WALK_SECONDS`` or, when walks take longer, as seldom
as keeps them to ``WALK_SHARE`` of the time. The one delay this adds: a job behind the front (handed
back in its place, an insert that committed late, an older job of a less urgent lane while walks are
expensive) waits for the next whole walk.
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
