"""Worker counters in multiprocess mode: real pool processes write them into the shared directory,
and /metrics in another process sums them."""

import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import Job, State
from tests.support.pools import PoolProcesses, wait_for
from workers.runtime.services import job_submit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_pool_processes_counters_reach_metrics(tmp_path, client, settings, monkeypatch):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    pools = PoolProcesses(str(tmp_path / "run"), PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
    try:
        pools.start("control")
        pools.start("crawl")
        jobs = [
            job_submit(job_type="synthetic", payload={"pool": "crawl"}, idempotency_key=uuid.uuid4().hex, actor="t").job
            for _ in range(12)
        ]
        wait_for(
            lambda: pools.check_running()
            and Job.objects.filter(pk__in=[j.pk for j in jobs], state=State.RESULT_STORED).count() == 12,
            timeout=30,
            message="12 jobs to complete",
        )
    finally:
        pools.stop_all()
    assert list(metrics_dir.glob("counter_*.db")), "the worker processes wrote their counters"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    settings.LEITSTAND_METRICS_TOKEN = "t0ken"
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken").content.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(body)
        for s in f.samples
    }
    assert samples[("leitstand_worker_jobs_total", (("outcome", "completed"), ("pool", "crawl")))] == 12
    assert ("leitstand_pool_consumers", (("pool", "crawl"),)) in samples, "the pipeline figures are collected too"
