"""End to end: the only worker process of a pool with due jobs stops; the control process's alert
evaluator fires pool_no_consumers, and the console home shows it with its runbook."""

import uuid

import pytest
from django.db import transaction
from django.urls import reverse

from alerts.models import Alert
from dashboard.roles import OPERATORS, roles_ensure
from tests.support.pools import PoolProcesses, wait_for
from workers.runtime.selectors import pool_consumers
from workers.runtime.services import job_submit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_stopping_the_only_worker_fires_the_zero_consumer_alert(tmp_path, client, django_user_model):
    pools = PoolProcesses(
        str(tmp_path),
        LEITSTAND_CRAWL_WORKERS="1",
        LEITSTAND_ALERT_FOR_SECONDS="0",
        LEITSTAND_ALERT_INTERVAL_SECONDS="0.2",
    )
    try:
        pools.start("control")
        pools.start("crawl")
        wait_for(
            lambda: pools.check_running() and pool_consumers()["crawl"] == 1,
            timeout=30,
            message="one live crawl consumer",
        )
        assert pools.terminate("crawl") == 0
        with transaction.atomic():  # all three at once: the evaluator runs every 0.2 s and counts what it sees
            jobs = [
                job_submit(
                    job_type="synthetic", payload={"pool": "crawl"}, idempotency_key=uuid.uuid4().hex, actor="t"
                ).job
                for _ in range(3)
            ]
        alert = wait_for(
            lambda: Alert.objects.filter(rule="pool_no_consumers", scope="pool:crawl", state="firing").first(),
            timeout=30,
            message="the zero-consumer alert to fire",
        )
    finally:
        pools.stop_all()
    assert alert.diagnosis.startswith("crawl: 0 consumers since ")
    assert "after SIGTERM: the pool is shutting down; 3 jobs due" in alert.diagnosis and jobs
    operator = django_user_model.objects.create_user("op", password="x" * 12, is_staff=True)
    operator.groups.add(roles_ensure()[OPERATORS])
    client.force_login(operator)
    home = client.get(reverse("admin:index")).content.decode()
    assert "pool_no_consumers" in home and alert.diagnosis in home.replace("&#x27;", "'")
    assert reverse("admin:runbook", args=["pool_no_consumers"]) in home
