"""What the console's paths page shows for one job type, over its newest checked attempts: how often
each path was taken, the drop-off per step, how attempts ended, the divergent and the slow ones, and
the shadow versions' comparisons. Every query is bounded by the window (the newest ``WINDOW`` checked
attempts of the type, read along ``attempt_type_checked_idx``), so the page stays fast at millions of
jobs."""

from __future__ import annotations

from django.db import connection

from workers.models import ShadowRun
from workers.registry import JobType

WINDOW = 5_000

_WINDOW_CTE = """
WITH recent AS MATERIALIZED (
    SELECT id, job_id, lease_version, path_signature, path_conforms, path_divergence, path_divergence_kind,
           duration_ms, slow, slow_reason, finished_at, outcome
    FROM jobs_attempt WHERE path_checked AND job_type = %(type)s ORDER BY id DESC LIMIT %(window)s
)
"""


def _query(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(_WINDOW_CTE + sql, params)
        return cursor.fetchall()


def step_order(job_type: JobType) -> list[str]:
    """The type's steps in declared order (the longest declared path first decides)."""
    order: list[str] = []
    for steps, _ in sorted(job_type.paths.paths, key=lambda p: -len(p[0])):
        for step in steps:
            if step not in order:
                order.append(step)
    return order


def type_paths(job_type: JobType) -> dict:
    params = {"type": job_type.name, "window": WINDOW}
    frequencies = _query("""
        SELECT path_signature, path_conforms, count(*), max(path_divergence),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms)
        FROM recent GROUP BY path_signature, path_conforms ORDER BY count(*) DESC LIMIT 40""", params)
    total = sum(row[2] for row in frequencies)
    funnel_rows = _query("""
        SELECT s.step, count(*),
               count(*) FILTER (WHERE s.outcome = 'ok'), count(*) FILTER (WHERE s.outcome = 'skipped'),
               count(*) FILTER (WHERE s.outcome = 'failed'),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY s.duration_ms),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY s.duration_ms)
        FROM recent r JOIN jobs_stepevent s ON s.job_id = r.job_id AND s.lease_version = r.lease_version
        GROUP BY s.step""", params)
    order = step_order(job_type)
    funnel_rows.sort(key=lambda row: (order.index(row[0]) if row[0] in order else len(order), row[0]))
    endings = dict(_query("""
        SELECT CASE
                 WHEN path_signature LIKE '%%-> skipped' THEN 'skipped'
                 WHEN path_signature LIKE '%%-> done' OR path_signature LIKE '%%-> recheck'
                      OR path_signature LIKE '%%-> review' THEN 'completed'
                 WHEN path_signature LIKE '(no steps)%%' THEN 'ended before its first step'
                 ELSE 'partial (failed or interrupted after some steps)' END, count(*)
        FROM recent GROUP BY 1""", params))
    divergent = _query("""
        SELECT id, job_id, lease_version, path_signature, path_divergence_kind, path_divergence, finished_at
        FROM recent WHERE path_conforms = false ORDER BY id DESC LIMIT 50""", params)
    slow = _query("""
        SELECT id, job_id, lease_version, duration_ms, slow_reason, finished_at
        FROM recent WHERE slow ORDER BY id DESC LIMIT 20""", params)
    kinds = _query("""
        SELECT path_divergence_kind, count(*) FROM recent WHERE path_conforms = false
        GROUP BY 1 ORDER BY 2 DESC""", params)
    started = max((row[1] for row in funnel_rows), default=0)
    return {
        "total": total,
        "conforming": sum(row[2] for row in frequencies if row[1]),
        "divergent_count": sum(row[2] for row in frequencies if row[1] is False),
        "frequencies": [{"signature": s, "conforms": c, "count": n, "share": n / total if total else 0,
                         "divergence": d, "median_ms": m} for s, c, n, d, m in frequencies],
        "funnel": [{"step": step, "started": n, "finished": ok, "skipped": skipped, "failed": failed,
                    "dropped": n - ok - skipped, "median_ms": p50, "p99_ms": p99,
                    "declared": step in order,
                    "bar": round(300 * n / started) if started else 0,
                    "bar_ok": round(300 * ok / started) if started else 0}
                   for step, n, ok, skipped, failed, p50, p99 in funnel_rows],
        "endings": sorted(endings.items(), key=lambda item: -item[1]),
        "divergent": [{"attempt": a, "job_id": j, "lease_version": v, "signature": s, "kind": k, "divergence": d,
                       "finished_at": f} for a, j, v, s, k, d, f in divergent],
        "kinds": kinds,
        "slow": [{"attempt": a, "job_id": j, "lease_version": v, "duration_ms": ms, "reason": r, "finished_at": f}
                 for a, j, v, ms, r, f in slow],
        "shadows": shadow_summary(job_type.name),
        "window": WINDOW,
    }


def shadow_summary(job_type: str) -> list[dict]:
    from django.db.models import Count, Q

    rows = (ShadowRun.objects.filter(job_type=job_type).values("processing_version")
            .annotate(runs=Count("id"), same=Count("id", filter=Q(same=True)),
                      sampled=Count("id", filter=Q(sampled=True))).order_by("processing_version"))
    summary = []
    for row in rows:
        latest = ShadowRun.objects.filter(job_type=job_type, processing_version=row["processing_version"],
                                          same=False).order_by("-id")[:10]
        summary.append({**row, "different": row["runs"] - row["same"], "latest_different": list(latest)})
    return summary


def attempt_timeline(job, attempt) -> dict | None:
    """The steps of one attempt on a time axis: offset and width in pixels of a 600-pixel track."""
    steps = list(job.steps.filter(lease_version=attempt.lease_version).order_by("id"))
    if not steps:
        return None
    start = attempt.started_at or steps[0].started_at
    offsets = [max((s.started_at - start).total_seconds() * 1000, 0.0) for s in steps]
    end = max(off + s.duration_ms for off, s in zip(offsets, steps))
    if attempt.duration_ms:
        end = max(end, attempt.duration_ms)
    scale = 600 / end if end > 0 else 0
    return {"total_ms": end, "steps": [
        {"step": s.step, "outcome": s.outcome, "offset_ms": off, "duration_ms": s.duration_ms,
         "x": round(off * scale), "width": max(round(s.duration_ms * scale), 2), "y": 6 + i * 24, "label_y": 22 + i * 24}
        for i, (off, s) in enumerate(zip(offsets, steps))], "height": 12 + 24 * len(steps)}
