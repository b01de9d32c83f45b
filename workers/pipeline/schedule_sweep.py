"""The ``crawl-schedules`` sweep: every ``LEITSTAND_CRAWL_SCHEDULE_SECONDS`` the control process starts
each source's due run (``schedules`` says when a slot is due), at most
``LEITSTAND_CRAWL_SCHEDULE_STARTS`` a round, most urgent source first, through
``services.crawl_start``. A source that cannot start is recorded on it and spends its slot; the
sources after it still start."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db.models import F
from django.db.models.functions import Coalesce, Greatest

from workers.pipeline import options
from workers.pipeline.models import Source
from workers.pipeline.schedules import ScheduleState, run_name, schedule_state, with_schedule
from workers.pipeline.services import crawl_start
from workers.runtime.sweeps import Stage, register_unit, require

logger = logging.getLogger(__name__)


def schedules_due() -> list[tuple[Source, ScheduleState]]:
    """Every active source with its schedule's state, most urgent first (priority, then oldest run)."""
    sources = with_schedule(Source.objects.filter(is_active=True)).order_by(
        "priority", F("last_slot_at").asc(nulls_first=True), "id"
    )
    return [(source, schedule_state(source)) for source in sources]


@dataclass(frozen=True)
class ScheduleSweepConfig:
    every_seconds: float
    starts_per_round: int

    def __post_init__(self) -> None:
        require(
            self.every_seconds >= 1,
            "LEITSTAND_CRAWL_SCHEDULE_SECONDS",
            f"must be at least 1, not {self.every_seconds!r}",
        )
        require(
            isinstance(self.starts_per_round, int) and self.starts_per_round >= 1,
            "LEITSTAND_CRAWL_SCHEDULE_STARTS",
            f"must be a whole number of at least 1, not {self.starts_per_round!r}",
        )

    @classmethod
    def from_options(cls, pipeline: options.PipelineOptions) -> ScheduleSweepConfig:
        return cls(every_seconds=pipeline.crawl_schedule_seconds, starts_per_round=pipeline.crawl_schedule_starts)


def run_once(config: ScheduleSweepConfig) -> int:
    """Start the due runs, most urgent source first; the number started."""
    started = 0
    for source, state in schedules_due():
        if started >= config.starts_per_round:
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


def register() -> None:
    register_unit("crawl-schedules", run_once, ScheduleSweepConfig.from_options(options.current()), stage=Stage.PLAN)
