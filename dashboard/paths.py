"""What the console's paths page shows for one job type, over its newest checked attempts: how often
each path was taken, the drop-off per step, how attempts ended, the divergent and the slow ones, and
the shadow versions' comparisons. Every query is bounded by the window (the newest ``WINDOW`` checked
attempts of the type, read along ``attempt_type_checked_idx``), so the page stays fast at millions of
jobs."""

from __future__ import annotations

from collections import Counter

from jobs import reads
from workers.runtime.models import ShadowRun
from workers.runtime.registry import JobType

WINDOW = 5_000
# The drop-off per step reads the step events of the newest attempts only (one index probe each).
FUNNEL_WINDOW = 2_000


def step_order(job_type: JobType) -> list[str]:
    """The type's steps in declared order (the longest declared path first decides)."""
    order: list[str] = []
    for steps, _ in sorted(job_type.paths.paths, key=lambda p: -len(p[0])):
        for step in steps:
            if step not in order:
                order.append(step)
    return order


def _ending(signature: str) -> str:
    if signature.endswith("-> skipped"):
        return "skipped"
    if signature.endswith(("-> done", "-> recheck", "-> review")):
        return "completed"
    if signature.startswith("(no steps)"):
        return "ended before its first step"
    return "partial (failed or interrupted after some steps)"


def type_paths(job_type: JobType) -> dict:
    """Three reads of the window: its paths grouped, its divergent and slow attempts, and the step
    events of its newest attempts."""
    params = {"type": job_type.name, "window": WINDOW}
    groups = reads.rows("path_groups", **params)
    flagged = reads.rows("path_flagged", **params)
    total = sum(row[3] for row in groups)
    endings: Counter = Counter()
    kinds: Counter = Counter()
    for signature, conforms, kind, count, _, _ in groups:
        endings[_ending(signature)] += count
        if conforms is False:
            kinds[kind] += count
    funnel_rows = reads.rows("path_funnel", type=job_type.name, funnel=FUNNEL_WINDOW)
    order = step_order(job_type)
    funnel_rows.sort(key=lambda row: (order.index(row[0]) if row[0] in order else len(order), row[0]))
    started = max((row[1] for row in funnel_rows), default=0)
    return {
        "total": total,
        "conforming": sum(row[3] for row in groups if row[1]),
        "divergent_count": sum(kinds.values()),
        "frequencies": [
            {
                "signature": signature,
                "conforms": conforms,
                "count": count,
                "share": count / total,
                "divergence": divergence,
                "median_ms": median,
            }
            for signature, conforms, _, count, divergence, median in groups[:40]
        ],
        "funnel": [
            {
                "step": step,
                "started": n,
                "finished": ok,
                "skipped": skipped,
                "failed": failed,
                "deferred": deferred,
                "median_ms": p50,
                "p99_ms": p99,
                "declared": step in order,
                "bar": round(300 * n / started) if started else 0,
                "bar_ok": round(300 * ok / started) if started else 0,
            }
            for step, n, ok, skipped, failed, deferred, p50, p99 in funnel_rows
        ],
        "endings": endings.most_common(),
        "divergent": [
            {
                "attempt": row[0],
                "job_id": row[1],
                "lease_version": row[2],
                "signature": row[3],
                "kind": row[6],
                "divergence": row[5],
                "finished_at": row[10],
            }
            for row in flagged
            if row[4] is False
        ][:50],
        "kinds": kinds.most_common(),
        "slow": [
            {
                "attempt": row[0],
                "job_id": row[1],
                "lease_version": row[2],
                "duration_ms": row[7],
                "reason": row[9],
                "finished_at": row[10],
            }
            for row in flagged
            if row[8]
        ][:20],
        "shadows": shadow_summary(job_type.name),
        "window": WINDOW,
        "funnel_window": FUNNEL_WINDOW,
    }


def shadow_summary(job_type: str) -> list[dict]:
    from django.db.models import Count, Q

    rows = (
        ShadowRun.objects.filter(job_type=job_type)
        .values("processing_version")
        .annotate(runs=Count("id"), same=Count("id", filter=Q(same=True)), sampled=Count("id", filter=Q(sampled=True)))
        .order_by("processing_version")
    )
    summary = []
    for row in rows:
        latest = ShadowRun.objects.filter(
            job_type=job_type, processing_version=row["processing_version"], same=False
        ).order_by("-id")[:10]
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
    return {
        "total_ms": end,
        "steps": [
            {
                "step": s.step,
                "outcome": s.outcome,
                "offset_ms": off,
                "duration_ms": s.duration_ms,
                "x": round(off * scale),
                "width": max(round(s.duration_ms * scale), 2),
                "y": 6 + i * 24,
                "label_y": 22 + i * 24,
            }
            for i, (off, s) in enumerate(zip(offsets, steps))
        ],
        "height": 12 + 24 * len(steps),
    }
