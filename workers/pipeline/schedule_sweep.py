"""The ``crawl-schedules`` sweep: the control process starts each source's due run (see
``schedules`` for when a slot is due), through ``services.crawl_start``."""

from __future__ import annotations

import logging

from django.db.models import F
from django.db.models.functions import Coalesce, Greatest

from workers.pipeline.models import Source
from workers.pipeline.schedules import SWEEP_SECONDS, ScheduleState, run_name, schedule_state, with_schedule
from workers.pipeline.services import crawl_start
from workers.runtime.sweeps import Stage, register_sweep

logger = logging.getLogger(__name__)


def schedules_due() -> list[tuple[Source, ScheduleState]]:
    """Every active source with its schedule's state, most urgent first (priority, then oldest run)."""
    sources = with_schedule(Source.objects.filter(is_active=True)).order_by(
        "priority", F("last_slot_at").asc(nulls_first=True), "id"
    )
    return [(source, schedule_state(source)) for source in sources]


def schedules_sweep(*, limit: int = 100) -> int:
    """Start the due runs (at most ``limit`` a round, most urgent source first); the number started."""
    started = 0
    for source, state in schedules_due():
        if started >= limit:
            break
        if not state.due:
            continue
        run = run_name(source, state.slot_at)
        try:
            # A source crawl_start refuses is recorded on it there; anything else it raises is recorded
            # here. Either way the sources after it in this round still start.
            if crawl_start(actor="schedule", sources=[source], run=run, slot_at=state.slot_at):
                started += 1
        except Exception as failed:
            logger.exception("crawl schedule: source %s could not start run %s", source.pk, run)
            Source.objects.filter(pk=source.pk).update(
                start_error=f"run {run}: {type(failed).__name__}: {failed}"[:500],
                # The slot is spent: the source is tried again at its next slot, not every round.
                last_slot_at=Greatest(Coalesce("last_slot_at", state.slot_at), state.slot_at),
            )
    return started


def sweeps_register() -> None:
    register_sweep("crawl-schedules", schedules_sweep, stage=Stage.PLAN, every_seconds=SWEEP_SECONDS)
