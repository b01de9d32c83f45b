"""The console's reads that are more than one query, beside the pages that show them: the home page's
context and the stuck leases. Each is a function of the database alone (no request)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, F, OuterRef, Subquery
from django.db.models.functions import Coalesce

from alerts.models import Alert, Silence
from alerts.silences import ActiveSilences
from dashboard import options as console_options
from dashboard.display import as_id
from dashboard.explain import heartbeat_limit_seconds
from dashboard.models import ConsoleSnapshot
from dashboard.operations.stuck import stuck_jobs
from dashboard.operations.trends import RANGES as TREND_RANGES
from jobs.batches import batches_progress
from jobs.display import ago
from jobs.leadership import CONTROL
from jobs.models import Attempt, AuditEntry, Batch, LeaderLease, State, StepEvent, database_now
from workers.runtime.models import WorkerProcess
from workers.runtime.selectors import LIVE_WITHIN_SECONDS, pools_with_consumers

OPEN_BATCHES = 5  # the newest running batches on the home page; the rest on the batch list


def home_context() -> dict:
    now = database_now()
    active_alerts, silences = _active_alerts(now)
    snapshot = ConsoleSnapshot.objects.filter(name="home").first()
    age = (now - snapshot.refreshed_at).total_seconds() if snapshot else None
    stale_after = max(console_options.current().snapshot_seconds * 6, 30)
    data = (
        snapshot.data
        if snapshot
        else {
            "pipeline": {"types": {}, "stale_writes_1h": 0},
            "business": {"sources": [], "review": {}, "rechecks": {}},
        }
    )
    pools = list(pools_with_consumers().order_by("name"))
    leader = LeaderLease.objects.filter(name=CONTROL).first()
    hosts: dict[str, list] = {}
    recent = WorkerProcess.objects.filter(last_seen_at__gte=now - timedelta(minutes=10)).order_by("host", "pool", "pid")
    for worker in recent:
        worker.seen_ago = ago((now - worker.last_seen_at).total_seconds())
        worker.is_live = (
            worker.stopped_at is None and (now - worker.last_seen_at).total_seconds() <= LIVE_WITHIN_SECONDS
        )
        hosts.setdefault(worker.host, []).append(worker)
    types = data["pipeline"]["types"]
    for figures in types.values():
        figures["oldest_due"] = (
            ago(figures["oldest_due_seconds"]) if figures.get("oldest_due_seconds") is not None else "—"
        )
        figures["waiting"] = sum(figures["states"].get(s, 0) for s in (State.PLANNED, State.FAILED))
    review_figures = data["business"].get("review", {})
    if review_figures.get("oldest_seconds") is not None:
        review_figures["oldest"] = ago(review_figures["oldest_seconds"])
    for source in data["business"]["sources"]:
        for key in ("last_candidate", "last_crawl"):
            age_s = source.get(f"{key}_age_seconds")
            source[key] = "never" if age_s is None else f"{ago(age_s)} ago"
    data["business"]["overdue"] = sum(1 for source in data["business"]["sources"] if source.get("is_overdue"))
    running = list(Batch.objects.filter(finished_at__isnull=True).order_by("-id")[: OPEN_BATCHES + 1])
    progress = batches_progress([b.pk for b in running[:OPEN_BATCHES]])
    return {
        "open_batches": [{"batch": b, "progress": progress[b.pk]} for b in running[:OPEN_BATCHES]],
        "open_batches_more": len(running) > OPEN_BATCHES,
        "snapshot": data,
        "snapshot_age": None if age is None else ago(age),
        "snapshot_stale": age is None or age > stale_after,
        "snapshot_took_ms": snapshot.took_ms if snapshot else None,
        "pools": pools,
        "hosts": hosts,
        "leader": leader,
        "leader_expired": leader is not None and leader.expires_at < now,
        "states": [s.value for s in State],
        "trend_ranges": list(TREND_RANGES),
        "recent_audit": AuditEntry.objects.order_by("-at")[:8],
        "active_alerts": active_alerts,
        "silences": silences,
    }


# Rows on the stuck-leases page (the oldest heartbeats first; the navigation counts them all). It is a
# live part, re-rendered every 5 s: 200 rows took 46 ms at 2,500 stuck leases, 100 take about half.
STUCK_ROWS = 100


def _active_alerts(now) -> tuple[list[Alert], list[Silence]]:
    """Firing and acknowledged alerts, each with the silence that mutes it (``alert.silence``), and
    the active silences."""
    silences = ActiveSilences(now)
    alerts = list(
        Alert.objects.filter(state__in=(Alert.State.FIRING, Alert.State.ACKNOWLEDGED)).order_by("state", "-fired_at")[
            :20
        ]
    )
    for alert in alerts:
        alert.silence = silences(alert)
    return alerts, silences.active


def stuck_leases(limit: int = STUCK_ROWS) -> list[dict]:
    """``stuck_jobs``, one query with the last step and rescues as subqueries."""
    now = database_now()
    last_step = StepEvent.objects.filter(job=OuterRef("pk")).order_by("-id").values("step")[:1]
    rescued = (
        Attempt.objects.filter(
            job=OuterRef("pk"), outcome__in=(Attempt.Outcome.LEASE_EXPIRED, Attempt.Outcome.WORKER_DIED)
        )
        .order_by()
        .values("job")
        .annotate(n=Count("id"))
        .values("n")
    )
    jobs = (
        stuck_jobs(now)
        .annotate(last_step=Subquery(last_step), rescued=Coalesce(Subquery(rescued), 0))
        .only(
            "id",
            "type",
            "state",
            "lease_owner",
            "lease_expires_at",
            "heartbeat_at",
            "attempts",
            "max_attempts",
            "lease_version",
            "pool",
            "state_changed_at",
        )
        .order_by(F("heartbeat_at").asc(nulls_first=True))[:limit]
    )
    alive = {
        (w.host, w.pid)
        for w in WorkerProcess.objects.filter(
            stopped_at__isnull=True, last_seen_at__gte=now - timedelta(seconds=LIVE_WITHIN_SECONDS)
        )
    }
    rows = []
    for job in jobs:
        beat = job.heartbeat_at or job.state_changed_at
        host, _, pid = job.lease_owner.split("/")[0].rpartition(":")  # host:pid/pool
        rows.append(
            {
                "job": job,
                "heartbeat_age": ago((now - beat).total_seconds()),
                "limit": ago(heartbeat_limit_seconds(job.type)),
                "expired": job.lease_expires_at is not None and job.lease_expires_at < now,
                "expiry": ago((now - job.lease_expires_at).total_seconds()) if job.lease_expires_at else "—",
                "worker_alive": (host, as_id(pid)) in alive,
                "last_step": job.last_step or "—",
                "rescued": job.rescued,
            }
        )
    return rows
