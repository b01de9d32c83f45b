"""A look that walks the leased set — the reaper's, a supervisor's look for orphans — is cheap while
the database can vacuum (10–25 ms), and costs a second or more while a long transaction on the
primary keeps a dead entry of every job leased meanwhile (``bench/horizon.py``). Run every round,
such a look then keeps a database connection busy all the time. ``Pace`` lets a look that took longer
than ``free_seconds`` wait ``factor`` times as long before the next, so it takes at most a tenth of
one connection's time; a cheap look runs every round as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Pace:
    factor: float = 10.0
    free_seconds: float = 0.05
    due: float = 0.0  # monotonic time of the next look

    def ready(self) -> bool:
        return time.monotonic() >= self.due

    def took(self, seconds: float) -> None:
        """The last look took ``seconds``: the next waits ``factor`` times as long, if that was long."""
        self.due = time.monotonic() + (self.factor * seconds if seconds > self.free_seconds else 0.0)

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Time the look inside: it sets when the next may run, also when it fails."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.took(time.monotonic() - started)
