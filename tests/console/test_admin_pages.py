"""Every admin page of the engine and the workers renders for an operator, with real records."""

import uuid

import pytest
from django.urls import reverse

from dashboard.roles import OPERATORS, roles_ensure
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.services import job_submit

PAGES = ["job", "attempt", "transition", "stalewrite", "effect", "stepevent"]
WORKER_PAGES = ["pool", "workerprocess", "robotsfile", "hoststate"]


@pytest.mark.django_db
def test_an_operator_sees_every_page(client, django_user_model):
    operator = django_user_model.objects.create_user("op", password="x" * 12, is_staff=True)
    operator.groups.add(roles_ensure()[OPERATORS])
    client.force_login(operator)
    job = job_submit(job_type="synthetic", payload={}, idempotency_key=uuid.uuid4().hex, actor="test").job
    Pool.objects.get_or_create(name="crawl")
    WorkerProcess.objects.create(host="h", pid=1, pool="crawl")
    for app, models in (("jobs", PAGES), ("workers", WORKER_PAGES)):
        for model in models:
            response = client.get(reverse(f"admin:{app}_{model}_changelist"))
            assert response.status_code == 200, (app, model)
    page = client.get(reverse("admin:jobs_job_change", args=[job.id]))
    assert page.status_code == 200 and b"Transitions" in page.content
    pools = client.get(reverse("admin:workers_pool_changelist"))
    assert b"live consumers" in pools.content.lower()
