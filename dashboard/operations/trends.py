"""Trends: a per-minute rollup per job type, recorded by the control process, and the series the
console's charts draw from it (1 h / 24 h / 7 d).

Each complete minute gets one row per job type: the open counts at that moment and the oldest due
job's age and the run-time percentiles, all from the console snapshot (refreshed every few seconds,
so nothing is counted twice), plus the jobs that ended done or dead within the minute (an index
range over ``finished_at``). A minute the control process missed (it was down) stays a gap: its
open counts are gone, and a chart shows the gap rather than an invention. Rows older than
``LEITSTAND_ROLLUP_DAYS`` leave in the same sweep.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection

from dashboard.models import ConsoleSnapshot, Rollup
from jobs import reads
from jobs.models import State, database_now

# Chart ranges: (span, bucket). Buckets keep a chart at a few hundred points.
RANGES = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "24h": (timedelta(hours=24), timedelta(minutes=10)),
    "7d": (timedelta(days=7), timedelta(hours=1)),
}


def rollups_record(*, keep_days: float) -> int:
    """Record the last complete minute (once: a second call in the same minute records nothing) and
    drop what is older than ``keep_days``; how many rows were written."""
    now = database_now()
    minute = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    Rollup.objects.filter(minute__lt=now - timedelta(days=keep_days)).delete()
    if Rollup.objects.filter(minute=minute).exists():
        return 0
    data = ConsoleSnapshot.objects.filter(name="home").values_list("data", flat=True).first() or {}
    types = data.get("pipeline", {}).get("types", {})
    ended: dict[tuple[str, str], int] = {}
    for job_type, state, count in reads.rows("ended_in_minute", start=minute, end=minute + timedelta(minutes=1)):
        ended[(job_type, state)] = count
    rows = []
    for job_type in sorted(set(types) | {job_type for job_type, _ in ended}):
        figures = types.get(job_type, {})
        states = figures.get("states", {})
        rows.append(
            Rollup(
                minute=minute,
                job_type=job_type,
                pool=figures.get("pool", ""),
                due=states.get(State.PLANNED, 0),
                running=states.get(State.RESERVED, 0) + states.get(State.RUNNING, 0),
                waiting_retry=states.get(State.FAILED, 0),
                done=ended.get((job_type, State.DONE), 0),
                dead=ended.get((job_type, State.DEAD), 0),
                oldest_due_seconds=figures.get("oldest_due_seconds"),
                p50_ms=figures.get("p50_ms"),
                p95_ms=figures.get("p95_ms"),
            )
        )
    Rollup.objects.bulk_create(rows, ignore_conflicts=True)  # two leaders in one minute: one row
    return len(rows)


SERIES = """
WITH minutes AS (
    SELECT minute, sum(due) AS due, sum(running) AS running, sum(waiting_retry) AS waiting_retry,
           sum(done) AS done, sum(dead) AS dead, max(oldest_due_seconds) AS oldest_due,
           max(p50_ms) AS p50, max(p95_ms) AS p95
    FROM dashboard_rollup
    WHERE minute >= %(since)s AND (%(type)s = '' OR job_type = %(type)s)
    GROUP BY minute
)
SELECT extract(epoch FROM date_bin(%(bucket)s, minute, TIMESTAMPTZ '2000-01-01')) AS t,
       avg(due), avg(running), avg(waiting_retry),
       sum(done)::float / count(*), sum(dead)::float / count(*),
       max(oldest_due), max(p50), max(p95)
FROM minutes GROUP BY 1 ORDER BY 1
"""
FIELDS = ("due", "running", "waiting_retry", "done_per_min", "dead_per_min", "oldest_due_s", "p50_ms", "p95_ms")


def trend_series(*, job_type: str = "", span: str = "1h") -> dict:
    """The charts' series over ``span`` (one of ``RANGES``), for one job type or all (summed; the
    oldest due age and the run times are the worst type's). Counts are averaged over a bucket,
    ended jobs are per minute."""
    if span not in RANGES:
        raise ValueError(f"range must be one of {', '.join(RANGES)}")
    length, bucket = RANGES[span]
    with connection.cursor() as cursor:
        cursor.execute(SERIES, {"since": database_now() - length, "type": job_type, "bucket": bucket})
        rows = cursor.fetchall()
    series = {"t": [float(row[0]) for row in rows]}
    for index, name in enumerate(FIELDS, start=1):
        series[name] = [None if row[index] is None else round(float(row[index]), 2) for row in rows]
    types = list(Rollup.objects.order_by().values_list("job_type", flat=True).distinct())
    return {"range": span, "bucket_seconds": bucket.total_seconds(), "type": job_type, "types": sorted(types), **series}
