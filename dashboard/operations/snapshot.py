"""The console's counts snapshot: the figures of the home page, refreshed by the control process.

Counting millions of jobs on every page view is what broke other dashboards (GoodJob at 3.5 M
jobs, 13 counts per page). Here the control process computes the figures every
``LEITSTAND_CONSOLE_SNAPSHOT_SECONDS`` (5 s) in a handful of index-backed queries and stores them as
one row; the home page reads that row and says how old it is. Finished jobs are counted as they
finish (``finished_at`` is indexed), so "done/h" moves with every job, never only at the end of a
batch.
"""

from __future__ import annotations

import time
from collections import defaultdict

from django.db import connection

from alerts.models import Alert
from dashboard import options as console_options
from dashboard.models import ConsoleSnapshot
from dashboard.operations.stuck import stuck_count
from history.storage import storage_figures
from jobs import reads
from jobs.models import Job, LeitstandNow, database_now
from workers.pipeline.schedules import sources_overdue
from workers.runtime.registry import registry

BUCKET_SECONDS = 300  # the sparklines: done per 5 minutes over the last 2 hours
BUCKETS = 24
RUNTIME_SAMPLE = 5000  # the latest finished attempts, for run-time percentiles
SMALL_TABLE_ROWS = 100_000
TERMINAL_COUNT_SECONDS = 300  # full counts of finished jobs (a scan of millions of rows) at most this often
STORAGE_SECONDS = 60  # database and table sizes (the home's Storage, /metrics)


def _rows(sql: str, now, params=None) -> list[tuple]:
    # Database time is read once per refresh and passed in: leitstand_now() is volatile, so in a
    # WHERE clause it would keep PostgreSQL from using an index (728 ms instead of ~5 ms at 2 M jobs).
    with connection.cursor() as cursor:
        cursor.execute(sql, {"now": now, **(params or {})})
        return cursor.fetchall()


def open_counts() -> list[tuple[str, str, int]]:
    """(type, state, count) of open jobs, exact, through the partial index over the open set."""
    return reads.rows("open_counts")


def oldest_due(now, types: list[str]) -> list[tuple[str, float]]:
    """(type, seconds) the oldest due planned job waits: one index descent per type (a GROUP BY would
    read every planned entry); types without a due job are left out."""
    return [
        (job_type, float(age))
        for job_type, age in reads.rows("oldest_due_per_type", now=now, types=types)
        if age is not None
    ]


def pipeline_figures(now, previous: dict | None = None) -> dict:
    types: dict[str, dict] = defaultdict(
        lambda: {
            "states": {},
            "oldest_due_seconds": None,
            "done_1h": 0,
            "dead_1h": 0,
            "done_buckets": [0] * BUCKETS,
            "p50_ms": None,
            "p95_ms": None,
            "sampled": 0,
            "retried": 0,
            "pool": "",
        }
    )
    for job_type, state, count in open_counts():
        types[job_type]["states"][state] = count
    # Finished jobs are millions of rows: counted in full only every TERMINAL_COUNT_SECONDS.
    terminal = terminal_counts(previous)
    for job_type, counts in terminal["counts"].items():
        types[job_type]["states"].update(counts)
    planned_types = [name for name, figures in types.items() if figures["states"].get("planned")]
    for job_type, age in oldest_due(now, planned_types):
        types[job_type]["oldest_due_seconds"] = float(age)
    for job_type, state, bucket, count in reads.rows(
        "ended_per_bucket", now=now, size=BUCKET_SECONDS, span=BUCKET_SECONDS * BUCKETS
    ):
        figures = types[job_type]
        if state == "done" and 0 <= bucket < BUCKETS:
            figures["done_buckets"][BUCKETS - 1 - bucket] += count
        if bucket < 3600 // BUCKET_SECONDS:
            if state == "done":
                figures["done_1h"] += count
            elif state == "dead":
                figures["dead_1h"] += count
    for job_type, p50, p95, sampled, retried in reads.rows("run_times_per_type", sample=RUNTIME_SAMPLE):
        types[job_type].update(p50_ms=float(p50), p95_ms=float(p95), sampled=sampled, retried=retried)
    for declared in registry.all():
        if declared.name in types:
            types[declared.name]["pool"] = declared.pool
    for name, figures in types.items():
        if not figures["pool"]:  # a type only pools met (a Django task by its path): its jobs say where
            figures["pool"] = next(
                iter(Job.objects.filter(type=name).order_by().values_list("pool", flat=True)[:1]), ""
            )
    (stale_1h,) = reads.row("stale_writes_last_hour", now=now)
    return {"types": dict(sorted(types.items())), "stale_writes_1h": stale_1h, "terminal": terminal}


def terminal_counts(previous: dict | None) -> dict:
    """Done, dead and cancelled per type: reused from the previous snapshot while it is fresh enough."""
    last = (previous or {}).get("pipeline", {}).get("terminal")
    if last and time.time() - last["counted_at"] < TERMINAL_COUNT_SECONDS and not _small_table():
        return last
    counts: dict[str, dict] = defaultdict(dict)
    for job_type, state, count in reads.rows("terminal_counts"):
        counts[job_type][state] = count
    return {"counts": dict(counts), "counted_at": time.time()}


def storage_measure(now, previous: dict | None) -> dict:
    """Sizes walk the database's files: measured once a minute, reused in the snapshots between."""
    last = (previous or {}).get("storage")
    if last and time.time() - last.get("measured_at", 0) < STORAGE_SECONDS:
        return last
    return {**storage_figures(now), "measured_at": time.time()}


def business_figures(now) -> dict:
    quiet_hours = console_options.current().quiet_source_hours
    overdue = {source.pk for source, _ in sources_overdue(now=now)}
    sources = [
        {
            "id": source_id,
            "name": name,
            "is_active": is_active,
            "last_candidate_age_seconds": None if age is None else float(age),
            "is_quiet": is_active and (age is None or float(age) > quiet_hours * 3600),
            "last_crawl_age_seconds": None if crawled is None else float(crawled),
            "is_overdue": source_id in overdue,  # what the alert crawl_overdue says
            "findings_24h": {},
        }
        for source_id, name, is_active, age, crawled in _rows(
            "SELECT s.id, s.name, s.is_active, extract(epoch FROM %(now)s - "
            "       (SELECT max(c.last_seen_at) FROM workers_candidate AS c WHERE c.source_id = s.id)), "
            "       extract(epoch FROM %(now)s - s.last_crawled_at) "
            "FROM workers_source AS s ORDER BY s.name",
            now,
        )
    ]
    by_id = {s["id"]: s for s in sources}
    for source_id, verdict, count in _rows(
        "SELECT c.source_id, f.verdict, count(*) FROM workers_finding AS f "
        "JOIN workers_candidate AS c ON c.id = f.candidate_id "
        "WHERE f.created_at > %(now)s - interval '24 hours' GROUP BY 1, 2",
        now,
    ):
        by_id[source_id]["findings_24h"][verdict] = count
    backlog, oldest = reads.row("review_backlog", now=now)
    active, due_now, due_24h, overdue = _rows(
        "SELECT count(*), count(*) FILTER (WHERE next_check_at <= %(now)s), "
        "count(*) FILTER (WHERE next_check_at <= %(now)s + interval '24 hours'), "
        "count(*) FILTER (WHERE next_check_at < %(now)s - %(late)s * interval '1 second') "
        "FROM rechecks_recheckplan WHERE state = 'active'",
        now,
        {"late": console_options.current().recheck_overdue_seconds},
    )[0]
    return {
        "sources": sources,
        "review": {"backlog": backlog, "oldest_seconds": None if oldest is None else float(oldest)},
        "rechecks": {"active": active, "due_now": due_now, "due_24h": due_24h, "overdue": overdue},
    }


def _small_table() -> bool:
    """Below this size a full count costs less than a few milliseconds: count finished jobs every time."""
    (estimate,) = reads.row("jobs_row_estimate")
    return estimate < SMALL_TABLE_ROWS


def snapshot_refresh() -> dict:
    """Compute and store the snapshot; returns the figures."""
    now = database_now()
    started = time.perf_counter()
    previous = ConsoleSnapshot.objects.filter(name="home").values_list("data", flat=True).first()
    data = {
        "pipeline": pipeline_figures(now, previous),
        "business": business_figures(now),
        "storage": storage_measure(now, previous),
        "stuck_leases": stuck_count(now),
        "alerts_firing": Alert.objects.filter(state=Alert.State.FIRING).count(),
    }
    took_ms = (time.perf_counter() - started) * 1000
    ConsoleSnapshot.objects.update_or_create(
        name="home", defaults={"data": data, "refreshed_at": LeitstandNow(), "took_ms": took_ms}
    )
    return data
