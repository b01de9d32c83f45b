"""Batches: named groups of jobs with live progress (docs/operations.md, "Batches").

- Counters: a trigger on the transition log (migration 0013) adds each member's transition to the
  batch's counter shard in the same transaction — ``total`` counts members created (children join
  their parent's batch), the others count members currently in done, failed, dead, ready_for_review
  (in review), recheck_due (rechecking) and cancelled. ``batch_progress`` sums the shards.
- Finalization: ``batches_finalize`` (the control process) ends a batch once every member has ended
  or was handed over (in review, rechecking) — one conditional UPDATE, so exactly once — with its
  statistics, and records the ``batch.finished`` webhook event in the same transaction.
- The sizing rule: ``batch_size_recommendation``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Sum

from jobs.correlation import header_safe
from jobs.models import Batch, BatchCounter, Job, State, database_now
from jobs.services import JobInputError, text_check
from jobs.sql import queries
from jobs.webhooks import event_record

COUNTERS = ("total", "done", "failed", "dead", "in_review", "rechecking", "cancelled")
# The counter of each state a member is counted in (the trigger of migration 0013 keeps them; a test
# compares its state lists with this map).
COUNTED_STATES = {
    State.DONE: "done",
    State.FAILED: "failed",
    State.DEAD: "dead",
    State.READY_FOR_REVIEW: "in_review",
    State.RECHECK_DUE: "rechecking",
    State.CANCELLED: "cancelled",
}
# A member has ended for its batch in these states (the last two: handed to a person or a recheck plan).
ENDED_STATES = (State.DONE, State.DEAD, State.CANCELLED, State.READY_FOR_REVIEW, State.RECHECK_DUE)
ENDED = tuple(COUNTED_STATES[state] for state in ENDED_STATES)
RATE_WINDOW = timedelta(minutes=15)


@dataclass(frozen=True)
class Progress:
    total: int = 0
    done: int = 0
    failed: int = 0
    dead: int = 0
    in_review: int = 0
    rechecking: int = 0
    cancelled: int = 0

    @property
    def ended(self) -> int:
        return sum(getattr(self, name) for name in ENDED)

    @property
    def open(self) -> int:
        return self.total - self.ended


def request_hash(document) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def batch_create(
    *,
    key: str,
    name: str,
    created_by: str,
    correlation_id: str = "",
    target_finish_at: datetime | None = None,
    request: dict | None = None,
    key_namespace: str = "",
    client_id: int | None = None,
) -> tuple[Batch, bool]:
    """The batch for ``key``: created, or the existing one (False) when the same request came before;
    another request under the same key is refused (``JobInputError`` on ``key``)."""
    if not isinstance(key, str) or not key.strip() or len(key) > 255:
        raise JobInputError("key", "must be a non-empty string of at most 255 characters")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise JobInputError("name", "must be a non-empty string of at most 200 characters")
    # Keys and names are logged and shown: no line break may forge a log line.
    text_check("key", key)
    text_check("name", name, limit=200)
    text_check("correlation_id", correlation_id)
    correlation_id = header_safe(correlation_id)
    digest = request_hash(request) if request is not None else ""
    with transaction.atomic():
        batch, created = Batch.objects.get_or_create(
            key=key,
            key_namespace=key_namespace,
            defaults={
                "name": name.strip(),
                "created_by": created_by[:255],
                "correlation_id": correlation_id or f"batch:{key}"[:255],
                "target_finish_at": target_finish_at,
                "request_hash": digest,
                "client_id": client_id,
            },
        )
    if not created and digest and batch.request_hash != digest:
        raise JobInputError("key", f"batch {key!r} exists with other contents; use a new key for another batch")
    return batch, created


def batch_progress(batch_id: int) -> Progress:
    sums = BatchCounter.objects.filter(batch_id=batch_id).aggregate(**{name: Sum(name) for name in COUNTERS})
    return Progress(**{name: sums[name] or 0 for name in COUNTERS})


def batches_progress(batch_ids: list[int]) -> dict[int, Progress]:
    rows = (
        BatchCounter.objects.filter(batch_id__in=batch_ids)
        .values("batch_id")
        .annotate(**{name: Sum(name) for name in COUNTERS})
    )
    found = {row["batch_id"]: Progress(**{name: row[name] or 0 for name in COUNTERS}) for row in rows}
    return {batch_id: found.get(batch_id, Progress()) for batch_id in batch_ids}


def batch_rate(batch: Batch, now: datetime) -> float:
    """Members ended per minute over the last 15 minutes (or since the batch began, if later)."""
    since = max(now - RATE_WINDOW, batch.created_at)
    ended = Job.objects.filter(batch=batch, state__in=ENDED_STATES, state_changed_at__gt=since).count()
    minutes = max((now - since).total_seconds() / 60, 1 / 60)
    return ended / minutes


def batch_eta(batch: Batch, progress: Progress, now: datetime) -> dict:
    """When the batch will end at the measured rate, and whether that misses its target."""
    rate = batch_rate(batch, now)
    if batch.finished_at:
        return {
            "rate_per_minute": rate,
            "eta": batch.finished_at,
            "misses_target": bool(batch.target_finish_at and batch.finished_at > batch.target_finish_at),
        }
    eta = now + timedelta(minutes=progress.open / rate) if rate > 0 else None
    late = bool(batch.target_finish_at and (eta is None and progress.open > 0 or eta and eta > batch.target_finish_at))
    return {"rate_per_minute": rate, "eta": eta, "misses_target": late}


BUCKETS = (
    timedelta(seconds=10),
    timedelta(seconds=30),
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=15),
    timedelta(hours=1),
)


def batch_timeline(batch: Batch, *, buckets: int = 24) -> tuple[timedelta, list[tuple[datetime, int]]]:
    """Members ended per bucket over the batch's life (its last ``buckets`` buckets): the bucket is
    the smallest of 10 s … 1 h that fits the batch's duration into ``buckets`` bars."""
    end = batch.finished_at or database_now()
    step = next((b for b in BUCKETS if b * buckets >= end - batch.created_at), BUCKETS[-1])
    start = max(end - step * buckets, batch.created_at)
    with connection.cursor() as cursor:
        cursor.execute(
            queries.batch_members_ended_per_bucket,
            {"step": step, "start": start, "batch_id": batch.pk, "ended": list(ENDED_STATES)},
        )
        counts = dict(cursor.fetchall())
    count = int((end - start) / step) + 1
    return step, [(start + k * step, counts.get(start + k * step, 0)) for k in range(count)]


def batches_finalize(*, limit: int = 100) -> int:
    """Finalize running batches whose every member has ended; returns how many."""
    running = list(Batch.objects.filter(finished_at__isnull=True).order_by("id").values_list("id", flat=True)[:limit])
    finalized = 0
    for batch_id, progress in batches_progress(running).items():
        if progress.total == 0 or progress.open > 0:
            continue
        with transaction.atomic():
            now = database_now()
            batch = Batch.objects.select_for_update().get(pk=batch_id)
            if batch.finished_at is not None:
                continue  # another control process was first
            progress = batch_progress(batch_id)  # under the lock: exact
            if progress.open > 0:
                continue
            seconds = max((now - batch.created_at).total_seconds(), 0.001)
            batch.stats = {
                **asdict(progress),
                "duration_seconds": round(seconds, 3),
                "throughput_per_hour": round(progress.ended / seconds * 3600, 1),
                "failure_rate": round((progress.dead + progress.cancelled) / progress.total, 4),
                "met_target": None if not batch.target_finish_at else now <= batch.target_finish_at,
            }
            batch.finished_at = now
            batch.save(update_fields=["stats", "finished_at"])
            event_record(kind="batch.finished", batch_id=batch.pk, data={"batch": batch_out(batch, progress, now=now)})
            finalized += 1
    return finalized


def batch_out(batch: Batch, progress: Progress, *, now: datetime | None = None) -> dict:
    """A batch as the API answers with it and the ``batch.finished`` event carries it (times as ISO 8601)."""
    eta = batch_eta(batch, progress, now or database_now())
    return {
        "id": batch.pk,
        "key": batch.key,
        "name": batch.name,
        "correlation_id": batch.correlation_id,
        "created_by": batch.created_by,
        "created_at": _iso(batch.created_at),
        "target_finish_at": _iso(batch.target_finish_at),
        "finished_at": _iso(batch.finished_at),
        "state": "finished" if batch.finished_at else "running",
        "counters": asdict(progress),
        "ended": progress.ended,
        "rate_per_minute": round(eta["rate_per_minute"], 3),
        "eta": _iso(eta["eta"]),
        "misses_target": eta["misses_target"],
        "stats": batch.stats,
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
