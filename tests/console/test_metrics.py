"""/metrics: protected, parseable by prometheus_client's parser, and with every documented metric."""

import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboard.operations.metrics import DOCUMENTED
from dashboard.operations.snapshot import snapshot_refresh
from jobs import insert
from jobs.models import State
from tests.conftest import job_in_state
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_are_off_without_a_token_or_allowed_addresses(client, settings):
    settings.LEITSTAND_METRICS_TOKEN, settings.LEITSTAND_METRICS_ALLOWED_IPS = "", []
    assert client.get("/metrics").status_code == 404


def test_metrics_need_the_token_and_contain_every_documented_metric(client, settings, make_job, pool_runtime):
    settings.LEITSTAND_METRICS_TOKEN = "scrape-secret-123"
    settings.LEITSTAND_METRICS_ALLOWED_IPS = []
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    for _ in range(2):
        job_submit(job_type="synthetic", payload={"pool": "analysis"}, idempotency_key=uuid.uuid4().hex, actor="t")
    job_in_state(make_job("crawl", pool="crawl"), State.READY_FOR_REVIEW)
    job_submit(job_type="synthetic", payload={}, idempotency_key="waiting", actor="t")
    pool_runtime("analysis").wake()  # the worker counters move
    snapshot_refresh()  # the storage figures come from the console snapshot
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-123")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    missing = {name.removesuffix("_total") for name in DOCUMENTED} - set(families)
    assert not missing, missing
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("leitstand_jobs", (("state", "planned"), ("type", "synthetic")))] == 1
    assert samples[("leitstand_review_backlog", ())] == 1
    assert samples[("leitstand_worker_jobs_total", (("outcome", "completed"), ("pool", "analysis")))] >= 2
    assert samples[("leitstand_oldest_due_job_age_seconds", (("type", "synthetic"),))] >= 0
    assert any(name.startswith("django_http_requests") for name in families), "django-prometheus's request metrics"


def test_an_allowed_address_may_scrape_without_a_token(client, settings):
    settings.LEITSTAND_METRICS_TOKEN, settings.LEITSTAND_METRICS_ALLOWED_IPS = "", ["127.0.0.1"]
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 401


def test_start_up_removes_the_metric_files_of_processes_that_are_gone(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from workers.runtime.metrics import multiprocess_dir_clean

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    for name in (f"counter_{dead_pid}.db", f"counter_{os.getpid()}.db", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert multiprocess_dir_clean() == [f"counter_{dead_pid}.db"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"counter_{os.getpid()}.db", "notes.txt"])


def test_flow_keys_are_labels_only_for_the_busiest_of_each_pool(client, settings):
    """100,000 keys must not become 100,000 series: the ten with the most leases per pool by name, the
    rest summed."""
    settings.LEITSTAND_METRICS_TOKEN, settings.LEITSTAND_METRICS_ALLOWED_IPS = "scrape-secret-123", []
    for key in range(12):
        for n in range(key + 1):
            job = insert.job_insert(
                type="flowmetrics",
                idempotency_key=f"{key}-{n}",
                payload={"k": f"key-{key:02d}"},
                actor="t",
                flow_key_declaration="payload.k",
            ).job
            job_in_state(job, State.RUNNING)
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-123")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    shown = {s.labels["key"]: s.value for s in families["leitstand_flow_key_running"].samples}
    assert shown == {f"key-{key:02d}": key + 1 for key in range(2, 12)}
    (others,) = families["leitstand_flow_key_running_others"].samples
    assert (others.labels, others.value) == ({"pool": "flowmetrics"}, 1 + 2)
