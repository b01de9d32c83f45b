"""Prometheus metrics: ``/metrics`` with django-prometheus's request metrics, the pipeline figures
computed from the database at scrape time, and the worker processes' counters.

django-q2 workers (and a multi-process WSGI server) are separate processes: with
``PROMETHEUS_MULTIPROC_DIR`` set, every process writes its counters into that directory (wiped by
``runpool`` at start-up) and this view aggregates them with prometheus_client's
``MultiProcessCollector``. django-prometheus's own view would build a fresh registry and drop the
pipeline collector, so this is our own view. It is protected: a bearer token
(``LEITSTAND_METRICS_TOKEN``) or an address allow-list (``LEITSTAND_METRICS_ALLOWED_IPS``); with
neither configured it answers 404.
"""

from __future__ import annotations

import hmac
import os
from datetime import datetime

from django.db import connection
from django.http import Http404, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

import workers.runtime.metrics  # noqa: E402,F401  (the worker counters, registered with the default registry)
from alerts.models import Alert
from api.client_ip import client_ip
from dashboard import options as console_options
from dashboard.models import ConsoleSnapshot
from dashboard.operations.snapshot import oldest_due, open_counts
from jobs import reads
from jobs.leadership import CONTROL
from jobs.models import DeposedWrite, LeaderLease, database_now
from workers.runtime import options as runtime_options
from workers.runtime.selectors import pool_consumers

FLOW_KEYS_SHOWN = 10  # per pool, by jobs holding leases
DOCUMENTED = {
    "leitstand_jobs": "Jobs by type and state (open states exact at scrape time; done, dead, cancelled from "
    "the console snapshot, at most 5 minutes old)",
    "leitstand_oldest_due_job_age_seconds": "Age of the oldest due planned job, by type",
    "leitstand_stuck_leases": "Leased jobs whose lease expired beyond the grace period, by pool",
    "leitstand_dead_letters": "Jobs in the dead-letter queue, by type",
    "leitstand_review_backlog": "Review cases waiting for a person",
    "leitstand_review_oldest_age_seconds": "Age of the oldest open review case",
    "leitstand_pool_consumers": "Live worker processes, by pool (from heartbeat age)",
    "leitstand_pool_paused": "1 if the pool is paused, by pool",
    "leitstand_recheck_plans_due": "Active recheck plans whose next check is due",
    "leitstand_recheck_plans_overdue": "Active recheck plans more than the overdue limit past their next check",
    "leitstand_alerts_firing": "Firing (unacknowledged) alerts, by rule",
    "leitstand_worker_jobs_total": "Jobs a worker process handled, by pool and outcome",
    "leitstand_api_refused_submissions_total": "API submissions refused to protect a pool (429, 503), by pool and "
    "reason (counted by the web processes, api/backpressure.py)",
    "leitstand_worker_wakeups_total": "Wake-ups worker processes ran, by pool and whether they found work",
    "leitstand_database_bytes": "Size of the database (console snapshot)",
    "leitstand_table_bytes": "Size of the largest tables with their indexes, by table (console snapshot)",
    "leitstand_table_dead_rows": "Dead row versions of the largest tables, by table (console snapshot)",
    "leitstand_oldest_job_age_seconds": "Age of the oldest job still in the database (retention works when this stays flat)",
    "leitstand_archive_last_written_timestamp_seconds": "When the archive last wrote a file (Unix time; 0: never)",
    "leitstand_archive_last_purge_timestamp_seconds": "When archived jobs were last purged (Unix time; 0: never)",
    "leitstand_archive_failed_files": "Archive files that could not be written (purging stops while there are any)",
    "leitstand_archived_jobs": "Jobs that left the database for the archive",
    "leitstand_leader_term": "Term of the control processes' leader lease (grows at each election; 0: nobody led yet)",
    "leitstand_leader_deposed_writes": "Writes of deposed control leaders that were refused",
    "leitstand_flow_key_running": f"Jobs holding leases, by pool and flow key: the {FLOW_KEYS_SHOWN} keys with the most "
    "per pool (the rest in leitstand_flow_key_running_others)",
    "leitstand_flow_key_running_others": "Jobs holding leases of the flow keys not shown by name, by pool",
    "leitstand_flow_keys_due": "Flow keys with due work waiting, by pool",
}


class PipelineCollector:
    # Flow keys are as many as the sources and clients: only the busiest are labels (bounded cardinality).
    """Computes the pipeline figures from the database at every scrape (a handful of index-backed
    queries; the snapshot supplies the counts of finished jobs)."""

    def describe(self):
        return []

    def collect(self):
        now = database_now()
        with connection.cursor() as cursor:
            jobs = GaugeMetricFamily("leitstand_jobs", DOCUMENTED["leitstand_jobs"], labels=["type", "state"])
            counts = open_counts()
            for job_type, state, count in counts:
                jobs.add_metric([job_type, state], count)
            dead = GaugeMetricFamily("leitstand_dead_letters", DOCUMENTED["leitstand_dead_letters"], labels=["type"])
            snapshot = ConsoleSnapshot.objects.filter(name="home").values_list("data", flat=True).first() or {}
            for job_type, finished in snapshot.get("pipeline", {}).get("terminal", {}).get("counts", {}).items():
                for state, count in finished.items():
                    jobs.add_metric([job_type, state], count)
                dead.add_metric([job_type], finished.get("dead", 0))
            yield jobs
            yield dead

            oldest = GaugeMetricFamily(
                "leitstand_oldest_due_job_age_seconds",
                DOCUMENTED["leitstand_oldest_due_job_age_seconds"],
                labels=["type"],
            )
            for job_type, age in oldest_due(now, sorted({t for t, state, _ in counts if state == "planned"})):
                oldest.add_metric([job_type], age)
            yield oldest

            stuck = GaugeMetricFamily("leitstand_stuck_leases", DOCUMENTED["leitstand_stuck_leases"], labels=["pool"])
            for pool, count in reads.rows(
                "stuck_leases_per_pool", now=now, grace=runtime_options.current().lease_grace_seconds
            ):
                stuck.add_metric([pool], count)
            yield stuck

            backlog, oldest_case = reads.row("review_backlog", now=now)
            yield GaugeMetricFamily("leitstand_review_backlog", DOCUMENTED["leitstand_review_backlog"], value=backlog)
            yield GaugeMetricFamily(
                "leitstand_review_oldest_age_seconds",
                DOCUMENTED["leitstand_review_oldest_age_seconds"],
                value=float(oldest_case or 0),
            )

            cursor.execute(
                "SELECT count(*) FILTER (WHERE next_check_at <= %(now)s), count(*) FILTER (WHERE "
                "next_check_at < %(now)s - %(late)s * interval '1 second') FROM rechecks_recheckplan "
                "WHERE state = 'active'",
                {"now": now, "late": console_options.current().recheck_overdue_seconds},
            )
            due, overdue = cursor.fetchone()
            yield GaugeMetricFamily("leitstand_recheck_plans_due", DOCUMENTED["leitstand_recheck_plans_due"], value=due)
            yield GaugeMetricFamily(
                "leitstand_recheck_plans_overdue", DOCUMENTED["leitstand_recheck_plans_overdue"], value=overdue
            )

            paused = GaugeMetricFamily("leitstand_pool_paused", DOCUMENTED["leitstand_pool_paused"], labels=["pool"])
            cursor.execute("SELECT name, is_paused FROM workers_pool")
            for pool, is_paused in cursor.fetchall():
                paused.add_metric([pool], int(is_paused))
            yield paused

        consumers = GaugeMetricFamily(
            "leitstand_pool_consumers", DOCUMENTED["leitstand_pool_consumers"], labels=["pool"]
        )
        for pool, count in pool_consumers().items():
            consumers.add_metric([pool], count)
        yield consumers
        yield from self.storage(snapshot)
        firing = GaugeMetricFamily("leitstand_alerts_firing", DOCUMENTED["leitstand_alerts_firing"], labels=["rule"])
        for rule in sorted(set(Alert.objects.filter(state=Alert.State.FIRING).values_list("rule", flat=True))):
            firing.add_metric([rule], Alert.objects.filter(state=Alert.State.FIRING, rule=rule).count())
        yield firing
        yield from self.flow_keys(now)
        lease = LeaderLease.objects.filter(name=CONTROL).values_list("term", flat=True).first()
        yield GaugeMetricFamily("leitstand_leader_term", DOCUMENTED["leitstand_leader_term"], value=lease or 0)
        yield GaugeMetricFamily(
            "leitstand_leader_deposed_writes",
            DOCUMENTED["leitstand_leader_deposed_writes"],
            value=DeposedWrite.objects.count(),
        )

    def flow_keys(self, now: datetime):
        """The busiest flow keys of each pool by name, the rest summed, and how many keys wait."""
        running = GaugeMetricFamily(
            "leitstand_flow_key_running", DOCUMENTED["leitstand_flow_key_running"], labels=["pool", "key"]
        )
        others = GaugeMetricFamily(
            "leitstand_flow_key_running_others", DOCUMENTED["leitstand_flow_key_running_others"], labels=["pool"]
        )
        by_pool: dict[str, list[tuple[int, str]]] = {}
        for pool, key, count in reads.rows("flow_running_by_key"):
            by_pool.setdefault(pool, []).append((count, key))
        for pool, counts in sorted(by_pool.items()):
            counts.sort(key=lambda item: (-item[0], item[1]))
            for count, key in counts[:FLOW_KEYS_SHOWN]:
                running.add_metric([pool, key], count)
            others.add_metric([pool], sum(count for count, _ in counts[FLOW_KEYS_SHOWN:]))
        due = GaugeMetricFamily("leitstand_flow_keys_due", DOCUMENTED["leitstand_flow_keys_due"], labels=["pool"])
        for pool, count in reads.rows("flow_keys_due_by_pool", now=now):
            due.add_metric([pool], count)
        yield from (running, others, due)

    def storage(self, snapshot: dict):
        """From the console snapshot: sizes walk the database's files, not worth a scrape's time."""
        storage = snapshot.get("storage")
        if not storage:
            return
        yield gauge("leitstand_database_bytes", storage["database_bytes"])
        sizes = GaugeMetricFamily("leitstand_table_bytes", DOCUMENTED["leitstand_table_bytes"], labels=["table"])
        dead = GaugeMetricFamily("leitstand_table_dead_rows", DOCUMENTED["leitstand_table_dead_rows"], labels=["table"])
        for table in storage["tables"]:
            sizes.add_metric([table["name"]], table["total_bytes"])
            dead.add_metric([table["name"]], table["dead_rows"])
        yield sizes
        yield dead
        yield gauge("leitstand_oldest_job_age_seconds", storage["oldest_job_age_seconds"] or 0)
        archive = storage["archive"]
        for name, moment in (
            ("leitstand_archive_last_written_timestamp_seconds", archive["last_written_at"]),
            ("leitstand_archive_last_purge_timestamp_seconds", archive["last_purged_at"]),
        ):
            yield gauge(name, datetime.fromisoformat(moment).timestamp() if moment else 0)
        yield gauge("leitstand_archive_failed_files", archive["failed_files"])
        yield gauge("leitstand_archived_jobs", archive["purged_jobs"])


def gauge(name: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, DOCUMENTED[name], value=value)


_PIPELINE = PipelineCollector()


def registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multi = CollectorRegistry()
        MultiProcessCollector(multi)
        multi.register(_PIPELINE)
        return multi
    if _PIPELINE not in REGISTRY._collector_to_names:
        REGISTRY.register(_PIPELINE)
    return REGISTRY


def _allowed(request) -> bool:
    token = console_options.current().metrics_token
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return True
    # The client's address behind LEITSTAND_TRUSTED_PROXIES (the proxy's own address would admit every
    # client behind it); an address a client writes into X-Forwarded-For itself is never used.
    return client_ip(request) in console_options.current().metrics_allowed_ips


def metrics_view(request):
    if not console_options.current().metrics_token and not console_options.current().metrics_allowed_ips:
        raise Http404("metrics are not enabled: set LEITSTAND_METRICS_TOKEN or LEITSTAND_METRICS_ALLOWED_IPS")
    if not _allowed(request):
        return HttpResponse(
            "a valid bearer token or an allowed address is required\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
