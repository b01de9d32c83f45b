"""Leadership by a lease row with a term: who runs the control sweeps, and fencing of what it writes.

Several control processes may run (on several hosts); the one holding the lease row
(``jobs_leaderlease``) leads. It renews the lease every round; when the lease expires (its process
hung, its host lost the network) another process takes the row over and the **term** grows by one.
Every write a leader's sweep makes runs in a transaction that first checks, under a ``FOR SHARE``
lock on the row, that its term is still current (``fenced``). The lock makes the check hold until
the transaction ends: an election waits for a running fenced transaction and cannot overtake it, and
a deposed leader that wakes up or heals finds a newer term, writes nothing and records the refused
write (``DeposedWrite``), as a stale attempt's write is refused and recorded.

Only a row and ordinary transactions: it works through PgBouncer in transaction mode, where a
session advisory lock would not (the lock would stay on a server connection other clients share).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.db import connection, transaction

from jobs import options
from jobs.models import DeposedWrite

logger = logging.getLogger("leitstand.leadership")

CONTROL = "control"  # the lease row of the control processes

_READ = "SELECT holder, expires_at > leitstand_now() FROM jobs_leaderlease WHERE name = %(name)s"

# Takes the row when it is free or expired, renews it when this holder has it; the term grows at each
# change of holder, and when a holder takes back a lease it had let expire.
_CLAIM = """
INSERT INTO jobs_leaderlease AS lease (name, holder, term, elected_at, renewed_at, expires_at)
VALUES (%(name)s, %(holder)s, 1, leitstand_now(), leitstand_now(), leitstand_now() + make_interval(secs => %(lease)s))
ON CONFLICT (name) DO UPDATE SET
    term = CASE WHEN lease.holder = EXCLUDED.holder AND lease.expires_at > leitstand_now()
                THEN lease.term ELSE lease.term + 1 END,
    elected_at = CASE WHEN lease.holder = EXCLUDED.holder AND lease.expires_at > leitstand_now()
                      THEN lease.elected_at ELSE leitstand_now() END,
    holder = EXCLUDED.holder,
    renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at
WHERE lease.holder = EXCLUDED.holder OR lease.expires_at <= leitstand_now()
RETURNING term
"""

# The transaction also ends by itself if its process stops (SIGSTOP, a lost network) for longer
# than a lease, so its lock never keeps the next leader waiting for long.
_FENCE = """
SELECT holder, term, expires_at > leitstand_now(),
       set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true)
FROM jobs_leaderlease WHERE name = %(name)s FOR SHARE
"""

_RELEASE = """
UPDATE jobs_leaderlease SET expires_at = leitstand_now() WHERE name = %(name)s AND holder = %(holder)s
"""


@dataclass(frozen=True)
class Term:
    """One leader's term: the lease row's name, who holds it, and the term's number."""

    name: str
    holder: str
    number: int
    lease_seconds: float


class Deposed(Exception):
    """The leader's term is over: another holder or a newer term holds the lease, or it expired."""

    def __init__(self, term: Term, operation: str, current: tuple | None) -> None:
        self.term, self.operation = term, operation
        self.current_holder, self.current_term = (current[0], current[1]) if current else ("", 0)
        super().__init__(
            f"{operation}: term {term.number} of {term.holder} is over "
            f"(the lease is held by {self.current_holder or 'nobody'} in term {self.current_term})"
        )


_leading: ContextVar[Term | None] = ContextVar("leitstand_leading_term", default=None)


def holder_name() -> str:
    """This process's name as a holder: host, process and a random part (a restarted process with the
    same PID on the same host is a new holder)."""
    return f"{options.current().host_name}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def leader_claim(name: str, holder: str, lease_seconds: float, *, lock_timeout_ms: int = 2000) -> Term | None:
    """Take or renew the lease ``name`` for ``holder``; its term, or None while another holds it.
    A follower only reads the row; it writes only when the lease is free or expired."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_READ, {"name": name})
        row = cursor.fetchone()
        if row is not None and row[0] != holder and row[1]:
            return None
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{lock_timeout_ms}ms"])
        cursor.execute(_CLAIM, {"name": name, "holder": holder, "lease": lease_seconds})
        row = cursor.fetchone()
    return Term(name, holder, row[0], lease_seconds) if row else None


def leader_release(term: Term) -> None:
    """End ``term``'s lease now (a clean shutdown), so another process leads at its next round."""
    with connection.cursor() as cursor:
        cursor.execute(_RELEASE, {"name": term.name, "holder": term.holder})


@contextmanager
def leading(term: Term) -> Iterator[None]:
    """The sweeps called inside write under ``term``: ``fenced`` checks it."""
    token = _leading.set(term)
    try:
        yield
    finally:
        _leading.reset(token)


def fence(operation: str, *, idle_seconds: float | None = None) -> None:
    """Inside a transaction: refuse (``Deposed``) unless the leading term is still current, and keep
    it current until the transaction ends. Outside a leader's sweep (a command, a test) it does nothing."""
    term = _leading.get()
    if term is None:
        return
    if not connection.in_atomic_block:
        raise RuntimeError("fence() must run inside a transaction: the lock it takes lasts as long as that")
    with connection.cursor() as cursor:
        idle = idle_seconds if idle_seconds is not None else term.lease_seconds
        cursor.execute(_FENCE, {"name": term.name, "idle_ms": str(int(idle * 1000))})
        current = cursor.fetchone()
    if current is None or current[0] != term.holder or current[1] != term.number or not current[2]:
        raise Deposed(term, operation, current)


@contextmanager
def fenced(operation: str, *, idle_seconds: float | None = None) -> Iterator[None]:
    """A transaction whose writes count only while the leading term is current (``fence``). It ends
    by itself after ``idle_seconds`` without a statement (one lease unless told): a transaction that
    waits for work on another connection, which must finish under the fence, says how long."""
    with transaction.atomic():
        fence(operation, idle_seconds=idle_seconds)
        yield


def deposed_record(deposed: Deposed) -> None:
    """Keep a refused write for the console and the metrics (after its transaction rolled back)."""
    DeposedWrite.objects.create(
        name=deposed.term.name,
        holder=deposed.term.holder,
        term=deposed.term.number,
        operation=deposed.operation[:64],
        current_holder=deposed.current_holder,
        current_term=deposed.current_term,
    )
    logger.warning("refused a deposed leader's write: %s", deposed)
