"""The control process: the registered sweeps (``workers/runtime/sweeps.py``) as named, supervised loops.

Several control processes may run (on several hosts); one leads, holding a PostgreSQL advisory
lock on a connection of its own, and the others wait to take over. A failing sweep is logged and
retried on the next round; it never stops the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection

from jobs import leases
from jobs.batches import batches_finalize
from jobs.paths import attempts_check
from jobs.retry import FALLBACK_POLICY
from jobs.webhooks import webhook_sweep
from workers.runtime import dispatch
from workers.runtime.registry import registry
from workers.runtime.replay import shadow_sample
from workers.runtime.sweeps import Stage, register_sweep, sweeps

logger = logging.getLogger("leitstand.control")

# pg_try_advisory_lock key of the leading control process ("leitstand control" in ASCII, folded).
LEADER_LOCK_KEY = 0x4C5354_434F4E54


def reap() -> int:
    grace = settings.LEITSTAND_LEASE_GRACE_SECONDS
    reaped = sum(len(leases.reap_expired(grace_seconds=grace, policy=t.retry, job_type=t.name)) for t in registry.all())
    return reaped + len(leases.reap_expired(grace_seconds=grace, policy=FALLBACK_POLICY))


def path_checks() -> dict:
    checked = attempts_check({t.name: t.paths for t in registry.all()})
    return {"checked": len(checked), "shadow_jobs": shadow_sample(checked)}


def sweeps_register() -> None:
    """The runtime's and the engine's own sweeps (``WorkersConfig.ready``); other apps add theirs."""
    register_sweep("reaper", reap, stage=Stage.ENGINE)
    register_sweep("retries", lambda: len(leases.retries_promote_due()), stage=Stage.ENGINE)
    register_sweep("review-queue", lambda: len(leases.unclear_queue_for_review()), stage=Stage.ENGINE)
    register_sweep("batches", batches_finalize, stage=Stage.PLAN)  # its events reach the outbox this round
    register_sweep("webhooks", webhook_sweep, stage=Stage.PLAN)
    register_sweep("dispatcher", dispatch.dispatch_sweep, stage=Stage.DISPATCH)
    register_sweep("path-checks", path_checks, stage=Stage.OBSERVE)


class Leadership:
    """Holds the leader lock on a dedicated connection, so Django's connection handling cannot drop it."""

    def __init__(self) -> None:
        self._connection: psycopg.Connection | None = None

    def is_leader(self) -> bool:
        try:
            if self._connection is None or self._connection.closed:
                self._connection = psycopg.connect(**_connection_parameters(), autocommit=True)
                self._connection.execute("SET application_name = 'leitstand-control'")
                (acquired,) = self._connection.execute("SELECT pg_try_advisory_lock(%s)", [LEADER_LOCK_KEY]).fetchone()
                if not acquired:
                    self._connection.close()
                    self._connection = None
                    return False
            self._connection.execute("SELECT 1")  # the lock lives as long as this session
            return True
        except psycopg.Error:
            logger.warning("lost the control leader lock's connection; trying again")
            self.release()
            return False

    def release(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except psycopg.Error:
                pass
            self._connection = None


def _connection_parameters() -> dict:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    return params


def run(
    stop: threading.Event, *, interval: float | None = None, on_round: Callable[[dict], None] | None = None
) -> None:
    """Run the sweeps every ``interval`` seconds while this process leads, until ``stop`` is set."""
    interval = interval or settings.LEITSTAND_CONTROL_INTERVAL_SECONDS
    leadership = Leadership()
    try:
        while not stop.is_set():
            started = time.monotonic()
            if leadership.is_leader():
                results = {}
                for sweep in sweeps.in_order():
                    try:
                        results[sweep.name] = sweep()
                    except Exception:
                        logger.exception("control sweep %s failed; it runs again next round", sweep.name)
                        close_old_connections()
                if on_round:
                    on_round(results)
            stop.wait(max(0.0, interval - (time.monotonic() - started)))
    finally:
        leadership.release()
