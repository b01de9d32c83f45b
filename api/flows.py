"""A pool's flow keys (issue 39): read each key's waiting and running jobs and settings, and set a
key's weight, running limit, rate limit or pause — with ``jobs:all`` (keys span every client's
work): with ``jobs:read`` to read, ``jobs:write`` to set. docs/operations.md, "Fair shares", says
how to choose."""

from __future__ import annotations

import logging
from datetime import datetime

from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import StrictBool, StrictInt

from api.auth import require
from api.fields import Text
from jobs import flows
from jobs.services import JobInputError
from workers.runtime.registry import registry

logger = logging.getLogger(__name__)
router = Router(tags=["flow keys"])
PAGE = 100


class FlowKeyOut(Schema):
    pool: str
    key: str = Field(description="The flow key as it was named ('' for jobs without one).")
    stored: str = Field(
        description="The key as jobs carry it, in metrics and logs: printable ASCII, other characters and '%' "
        "percent-encoded as UTF-8."
    )
    waiting: int = Field(description="Planned jobs (counted up to 10,000 per lane).")
    oldest_due: datetime | None = Field(description="When its first planned job is due; null: none planned.")
    running: int = Field(description="Its jobs holding leases now, on every host.")
    max_running: int | None = Field(description="Its own running limit; null: the pool's default.")
    limit: int | None = Field(description="The running limit in effect; null: none.")
    weight: int
    paused: bool
    rate_starts: int | None = Field(
        description="At most this many of its jobs start per rate_seconds; null: no rate limit."
    )
    rate_seconds: int | None = Field(description="The rate limit's interval in seconds; null: no rate limit.")
    rate_limited_until: datetime | None = Field(
        description="Until when its rate limit holds its next job back; null: it may start one now."
    )
    reason: str = Field(description="Why its settings were last changed.")


class FlowKeyPage(Schema):
    items: list[FlowKeyOut]
    next_after: str | None = Field(description="Pass as ?after= for the next keys; null on the last page.")


class FlowKeyIn(Schema):
    key: Text = Field(max_length=255, description="The flow key ('' for jobs without one).")
    weight: StrictInt | None = Field(default=None, description="1 … 1000; left out: unchanged.")
    max_running: StrictInt | None = Field(
        default=None, description="1 … 100,000; null: the pool's default; left out: unchanged."
    )
    paused: StrictBool | None = Field(default=None, description="Left out: unchanged.")
    rate_starts: StrictInt | None = Field(
        default=None, description="1 … 1,000,000 starts per rate_seconds; null: no rate limit; left out: unchanged."
    )
    rate_seconds: StrictInt | None = Field(
        default=None, description="1 … 86,400 seconds; given with rate_starts (null with it)."
    )
    reason: Text = Field(max_length=500, description="Why (required; recorded with the change).")


def _out(pool: str, row: dict, default_limit: int | None) -> dict:
    return {**row, "pool": pool, "limit": row["max_running"] or default_limit}


def _client_pool(pool: str) -> None:
    """404 for a pool no type runs in; 403 for one that carries only the system's own work: a token,
    ``jobs:all`` included, could otherwise pause every alert and webhook (operators keep the
    console's per-pool key view, audited)."""
    if pool not in registry.pools():
        raise HttpError(404, f"no pool {pool!r}")
    if pool not in registry.client_pools():
        raise HttpError(
            403, f"pool {pool!r} carries the system's own work: its keys are set by operators in the console"
        )


@router.get("/pools/{pool}/keys", response=FlowKeyPage, summary="List a pool's flow keys")
def flow_keys_list(request, pool: str, after: Text | None = None, limit: int = Query(PAGE, ge=1, le=PAGE)):
    """A pool's keys with work or settings, in key order, a page at a time (``after``: the last key of
    the page before)."""
    require(request, "jobs:all")
    require(request, "jobs:read")
    _client_pool(pool)
    rows = flows.flow_keys(pool, limit=limit + 1, after=after)
    default_limit = registry.flow_limit(pool)
    return {
        "items": [_out(pool, row, default_limit) for row in rows[:limit]],
        "next_after": rows[limit - 1]["key"] if len(rows) > limit else None,
    }


@router.put("/pools/{pool}/keys", response=FlowKeyOut, summary="Set a flow key's weight, limits or pause")
def flow_key_set(request, pool: str, body: FlowKeyIn):
    """Set one key's weight, running limit, rate limit or pause (what the body leaves out stays);
    applies to the claims from a second later, on every host."""
    require(request, "jobs:all")
    require(request, "jobs:write")
    _client_pool(pool)
    given = body.model_fields_set
    changes = {name: getattr(body, name) for name in ("weight", "max_running", "paused") if name in given}
    if given & {"rate_starts", "rate_seconds"}:
        if not given >= {"rate_starts", "rate_seconds"} or (body.rate_starts is None) != (body.rate_seconds is None):
            raise JobInputError("rate_seconds", "must be given with rate_starts, both numbers or both null")
        changes["rate"] = None if body.rate_starts is None else (body.rate_starts, body.rate_seconds)
    flows.flow_key_set(pool=pool, key=body.key, actor=f"api:{request.auth.name}", reason=body.reason, **changes)
    logger.info(
        "flow key %r of pool %s set by token %s: %s (%s)", body.key, pool, request.auth.name, changes, body.reason
    )
    return _out(pool, flows.flow_key_read(pool, body.key), registry.flow_limit(pool))
