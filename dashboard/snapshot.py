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

from django.conf import settings
from django.db import connection

from dashboard.models import ConsoleSnapshot
from jobs.models import LeitstandNow

BUCKET_SECONDS = 300  # the sparklines: done per 5 minutes over the last 2 hours
BUCKETS = 24
RUNTIME_SAMPLE = 5000  # the latest finished attempts, for run-time percentiles


def _rows(sql: str, params=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or {})
        return cursor.fetchall()


def pipeline_figures() -> dict:
    types: dict[str, dict] = defaultdict(lambda: {
        "states": {}, "oldest_due_seconds": None, "done_1h": 0, "dead_1h": 0, "done_buckets": [0] * BUCKETS,
        "p50_ms": None, "p95_ms": None, "sampled": 0, "retried": 0, "pool": "",
    })
    for job_type, pool, state, count in _rows(
            "SELECT type, pool, state, count(*) FROM jobs_job GROUP BY type, pool, state"):
        types[job_type]["states"][state] = count
        types[job_type]["pool"] = pool
    for job_type, age in _rows(
            "SELECT type, extract(epoch FROM leitstand_now() - min(due_at)) FROM jobs_job "
            "WHERE state = 'planned' AND due_at <= leitstand_now() GROUP BY type"):
        types[job_type]["oldest_due_seconds"] = float(age)
    for job_type, state, bucket, count in _rows(
            "SELECT type, state, floor(extract(epoch FROM leitstand_now() - finished_at) / %(size)s)::int, count(*) "
            "FROM jobs_job WHERE finished_at > leitstand_now() - %(span)s * interval '1 second' "
            "GROUP BY 1, 2, 3", {"size": BUCKET_SECONDS, "span": BUCKET_SECONDS * BUCKETS}):
        figures = types[job_type]
        if state == "done" and 0 <= bucket < BUCKETS:
            figures["done_buckets"][BUCKETS - 1 - bucket] += count
        if bucket < 3600 // BUCKET_SECONDS:
            if state == "done":
                figures["done_1h"] += count
            elif state == "dead":
                figures["dead_1h"] += count
    for job_type, p50, p95, sampled, retried in _rows(
            "SELECT j.type, percentile_cont(0.5) WITHIN GROUP (ORDER BY a.ms), "
            "percentile_cont(0.95) WITHIN GROUP (ORDER BY a.ms), count(*), "
            "count(*) FILTER (WHERE a.outcome IN ('failed', 'lease_expired')) "
            "FROM (SELECT job_id, outcome, extract(epoch FROM finished_at - started_at) * 1000 AS ms "
            "      FROM jobs_attempt WHERE finished_at IS NOT NULL AND started_at IS NOT NULL "
            "      ORDER BY id DESC LIMIT %(sample)s) AS a "
            "JOIN jobs_job AS j ON j.id = a.job_id GROUP BY j.type", {"sample": RUNTIME_SAMPLE}):
        types[job_type].update(p50_ms=float(p50), p95_ms=float(p95), sampled=sampled, retried=retried)
    (stale_1h,) = _rows("SELECT count(*) FROM jobs_stalewrite WHERE at > leitstand_now() - interval '1 hour'")[0]
    return {"types": dict(sorted(types.items())), "stale_writes_1h": stale_1h}


def business_figures() -> dict:
    quiet_hours = settings.LEITSTAND_CONSOLE["quiet_source_hours"]
    sources = [
        {"id": source_id, "name": name, "is_active": is_active,
         "last_candidate_age_seconds": None if age is None else float(age),
         "is_quiet": is_active and (age is None or float(age) > quiet_hours * 3600),
         "findings_24h": {}}
        for source_id, name, is_active, age in _rows(
            "SELECT s.id, s.name, s.is_active, extract(epoch FROM leitstand_now() - "
            "       (SELECT max(c.last_seen_at) FROM workers_candidate AS c WHERE c.source_id = s.id)) "
            "FROM workers_source AS s ORDER BY s.name")
    ]
    by_id = {s["id"]: s for s in sources}
    for source_id, verdict, count in _rows(
            "SELECT c.source_id, f.verdict, count(*) FROM workers_finding AS f "
            "JOIN workers_candidate AS c ON c.id = f.candidate_id "
            "WHERE f.created_at > leitstand_now() - interval '24 hours' GROUP BY 1, 2"):
        by_id[source_id]["findings_24h"][verdict] = count
    backlog, oldest = _rows(
        "SELECT count(*), extract(epoch FROM leitstand_now() - min(state_changed_at)) FROM jobs_job "
        "WHERE state = 'ready_for_review'")[0]
    active, due_now, due_24h, overdue = _rows(
        "SELECT count(*), count(*) FILTER (WHERE next_check_at <= leitstand_now()), "
        "count(*) FILTER (WHERE next_check_at <= leitstand_now() + interval '24 hours'), "
        "count(*) FILTER (WHERE next_check_at < leitstand_now() - %(late)s * interval '1 second') "
        "FROM rechecks_recheckplan WHERE state = 'active'",
        {"late": settings.LEITSTAND_CONSOLE["recheck_overdue_seconds"]})[0]
    return {
        "sources": sources,
        "review": {"backlog": backlog, "oldest_seconds": None if oldest is None else float(oldest)},
        "rechecks": {"active": active, "due_now": due_now, "due_24h": due_24h, "overdue": overdue},
    }


def snapshot_refresh() -> dict:
    """Compute and store the snapshot; returns the figures."""
    started = time.perf_counter()
    data = {"pipeline": pipeline_figures(), "business": business_figures()}
    took_ms = (time.perf_counter() - started) * 1000
    ConsoleSnapshot.objects.update_or_create(name="home", defaults={
        "data": data, "refreshed_at": LeitstandNow(), "took_ms": took_ms})
    return data


class Throttled:
    """Run ``function`` at most every ``seconds`` (the control process calls its sweeps every round)."""

    def __init__(self, function, seconds: float) -> None:
        self.function, self.seconds, self.last = function, seconds, 0.0

    def __call__(self):
        if time.monotonic() - self.last < self.seconds:
            return None
        self.last = time.monotonic()
        self.function()
        return True
