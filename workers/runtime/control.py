"""The control process: the registered sweeps (``workers/runtime/sweeps.py``) as named, supervised loops.

Several control processes may run (on several hosts); one leads, holding the leader lease row
(``jobs/leadership.py``) in a term, and the others wait to take over when it expires; every sweep's
writes are fenced by the term. A failing sweep is logged and
retried on the next round; it never stops the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections

from jobs import leadership
from workers.runtime import (
    batch_sweep,
    dispatch_sweep,
    options,
    path_check_sweep,
    reaper_sweep,
    retry_sweep,
    review_queue_sweep,
    webhook_sweep,
)
from workers.runtime.sweeps import sweeps

logger = logging.getLogger("leitstand.control")


def sweeps_register() -> None:
    """The runtime's and the engine's own sweeps (``WorkersConfig.ready``); other apps add theirs."""
    # In this order within their stages: finalized batches' events reach the outbox in the same round.
    for unit in (reaper_sweep, retry_sweep, review_queue_sweep, batch_sweep, webhook_sweep):
        unit.register()
    dispatch_sweep.register()
    path_check_sweep.register()


def run(
    stop: threading.Event, *, interval: float | None = None, on_round: Callable[[dict], None] | None = None
) -> None:
    """Run the sweeps every ``interval`` seconds while this process leads, until ``stop`` is set.

    Each round renews (or tries to take) the leader lease; a sweep runs in a transaction fenced by
    the term (``jobs/leadership.py``), unless it was registered ``fenced=False`` and fences its own
    transactions. A deposed leader's refused write ends its round; it is recorded."""
    interval = interval or options.current().control_interval_seconds
    holder = leadership.holder_name()
    term = None
    try:
        while not stop.is_set():
            started = time.monotonic()
            term = _claim(holder, term)
            if term is not None:
                results = _round(term)
                if on_round:
                    on_round(results)
            stop.wait(max(0.0, interval - (time.monotonic() - started)))
    finally:
        if term is not None:
            try:
                leadership.leader_release(term)
            except DatabaseError:
                pass  # the lease then expires by itself


def _claim(holder: str, term: leadership.Term | None) -> leadership.Term | None:
    try:
        claimed = leadership.leader_claim(leadership.CONTROL, holder, options.current().control_leader_lease_seconds)
    except DatabaseError:
        logger.warning("could not reach the leader lease; trying again next round")
        close_old_connections()
        return None
    if claimed != term:
        if claimed is not None:
            logger.info("control: leading in term %d (%s)", claimed.number, holder)
        elif term is not None:
            logger.warning("control: no longer leading (term %d is over)", term.number)
    return claimed


def _round(term: leadership.Term) -> dict:
    results = {}
    with leadership.leading(term):
        for sweep in sweeps.in_order():
            if not sweep.due():  # no transaction for a sweep that waits for its interval
                results[sweep.name] = None
                continue
            try:
                if sweep.fenced:
                    with leadership.fenced(sweep.name):
                        results[sweep.name] = sweep()
                else:
                    results[sweep.name] = sweep()
            except leadership.Deposed as deposed:
                _deposed_record(deposed)
                break
            except Exception:
                logger.exception("control sweep %s failed; it runs again next round", sweep.name)
                close_old_connections()
    return results


def _deposed_record(deposed: leadership.Deposed) -> None:
    try:
        leadership.deposed_record(deposed)
    except DatabaseError:
        logger.warning("could not record a refused write of a deposed leader: %s", deposed)
        close_old_connections()
