"""The source-schedule resource: read and set how often a source crawls itself (``jobs:all`` tokens).

Sources are shared by every client (like candidates and assets), so only a token with ``jobs:all``
reads or changes them: with ``jobs:read`` to read, ``jobs:write`` to set.
"""

from __future__ import annotations

from datetime import datetime, time

from django.http import Http404
from ninja import Field, Router, Schema
from pydantic import StrictInt

from api.auth import require
from api.fields import Text
from jobs.services import JobInputError
from workers.pipeline.models import Source
from workers.pipeline.schedules import schedule_state, with_schedule, zone_of
from workers.pipeline.services import source_schedule_set

router = Router(tags=["sources"])


class RunOut(Schema):
    batch_id: int
    name: str
    started_at: datetime
    finished_at: datetime | None


class ScheduleOut(Schema):
    source_id: int
    name: str
    is_active: bool
    crawl_every_minutes: int = Field(description="The interval in effect (the source's, else the default).")
    is_default_interval: bool
    window_start: time | None
    window_end: time | None
    time_zone: str = Field(description="The zone slots and window are counted in.")
    last_run: RunOut | None
    last_crawled_at: datetime | None
    next_run_at: datetime | None = Field(description="When the next run starts; null while the source waits.")
    due: bool
    waiting: str = Field(description="Why the source does not run now; empty when it is due.")


class ScheduleIn(Schema):
    crawl_every_minutes: StrictInt | None = Field(
        default=None, description="Minutes between runs (1 … 44640); null: the installation's default."
    )
    window_start: time | None = Field(default=None, description="Local time runs may start from (HH:MM).")
    window_end: time | None = Field(default=None, description="Local time runs may start until; may pass midnight.")
    time_zone: Text = Field(default="", max_length=64, description="An IANA zone; empty: the installation's.")


def _sources(request):
    require(request, "jobs:all")  # sources belong to no client: every client's crawls share them
    return with_schedule(Source.objects.all())


def schedule_out(source: Source) -> dict:
    state = schedule_state(source)
    run = source.last_run
    return {
        "source_id": source.pk,
        "name": source.name,
        "is_active": source.is_active,
        "crawl_every_minutes": state.every_minutes,
        "is_default_interval": source.crawl_every_minutes is None,
        "window_start": source.window_start,
        "window_end": source.window_end,
        "time_zone": zone_of(source).key,
        "last_run": run
        and {"batch_id": run.pk, "name": run.name, "started_at": run.created_at, "finished_at": run.finished_at},
        "last_crawled_at": source.last_crawled_at,
        "next_run_at": state.next_at,
        "due": state.due,
        "waiting": state.waiting,
    }


@router.get("/sources", response=list[ScheduleOut], summary="List the sources' crawl schedules")
def sources_list(request):
    """Every source with its schedule, by name."""
    require(request, "jobs:read")
    return [schedule_out(source) for source in _sources(request).order_by("name")]


@router.get("/sources/{source_id}/schedule", response=ScheduleOut, summary="Read a source's crawl schedule")
def schedule_get(request, source_id: int):
    """One source's crawl schedule, as in the list: its interval, window, zone, last run and next run."""
    require(request, "jobs:read")
    source = _sources(request).filter(pk=source_id).first()
    if source is None:
        raise Http404(f"no source {source_id}")
    return schedule_out(source)


@router.put("/sources/{source_id}/schedule", response=ScheduleOut, summary="Set a source's crawl schedule")
def schedule_set(request, source_id: int, body: ScheduleIn):
    """Set a source's schedule: the whole of it (fields left out take their defaults: the installation's
    interval, no window, the installation's time zone). The next slot follows the new interval."""
    require(request, "jobs:write")
    if not _sources(request).filter(pk=source_id).exists():
        raise Http404(f"no source {source_id}")
    for name in ("window_start", "window_end"):
        moment = getattr(body, name)
        if moment is not None and moment.tzinfo is not None:
            raise JobInputError(name, "is local time in the schedule's time zone: give it without an offset")
    source_schedule_set(
        source_id=source_id,
        crawl_every_minutes=body.crawl_every_minutes,
        window_start=body.window_start,
        window_end=body.window_end,
        time_zone=body.time_zone,
        actor=f"api:{request.auth.name}",
    )
    return schedule_out(_sources(request).get(pk=source_id))
