"""The console's batch pages: the list with progress bars and the sizing table, the batch page with
its counters, rate, ETA and members; the alert rule for a batch that will miss its target."""

from datetime import timedelta

import pytest

from alerts import evaluation
from alerts.models import Alert
from jobs.batches import batch_create
from jobs.models import Batch, Job, database_now
from jobs.services import job_confirm
from tests.console.test_console import login  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def batch(make_job, pool_runtime):
    batch, _ = batch_create(key="nightly", name="nightly import", created_by="api:php-core")
    Batch.objects.filter(pk=batch.pk).update(
        created_at=database_now() - timedelta(minutes=30), target_finish_at=database_now() + timedelta(minutes=1)
    )
    jobs = [make_job("synthetic", pool="crawl", batch_id=batch.pk, payload={}) for _ in range(10)]
    pool_runtime("crawl").wake()
    for job in jobs[:2]:
        job_confirm(job_id=job.pk, actor="test")
    return Batch.objects.get(pk=batch.pk)


def test_the_batch_list_shows_progress_and_the_sizing_rule(client, login, batch):  # noqa: F811
    login("viewer")
    page = client.get("/admin/jobs/batch/").content.decode()
    assert 'aria-label="2 of 10 ended (done 2)"' in page and "nightly import" in page
    assert "Batch size for 15 minutes" in page and "<td>crawl</td>" in page


def test_the_batch_page_shows_counters_rate_eta_and_members(client, login, batch):  # noqa: F811
    login("viewer")
    page = client.get(f"/admin/jobs/batch/{batch.pk}/change/").content.decode()
    assert '<strong data-key="ended" id="batch-ended">2</strong> of <strong>10</strong> members ended' in page
    assert "misses it" in page and "ETA" in page
    outsider = Job.objects.create(type="synthetic", pool="crawl", idempotency_key="not-a-member", correlation_id="x")
    members = client.get(f"/admin/jobs/job/?batch={batch.pk}")
    assert {j.pk for j in members.context["cl"].result_list} == set(
        Job.objects.filter(batch=batch).values_list("pk", flat=True)
    )
    assert outsider.pk not in {j.pk for j in members.context["cl"].result_list}


def test_a_batch_that_will_miss_its_target_fires_the_alert(batch, settings):
    settings.LEITSTAND_ALERTS = {
        **settings.LEITSTAND_ALERTS,
        "batch_will_miss_target": {**settings.LEITSTAND_ALERTS["batch_will_miss_target"], "for_seconds": 0},
    }
    evaluation.alerts_evaluate()
    alert = Alert.objects.get(rule="batch_will_miss_target")
    assert alert.scope == f"batch:{batch.pk}" and alert.state == Alert.State.FIRING
    assert "batch 'nightly import': 2 of 10 ended" in alert.diagnosis


def test_a_member_job_page_links_its_batch(client, login, batch):  # noqa: F811
    login("viewer")
    member = Job.objects.filter(batch=batch).first()
    page = client.get(f"/admin/jobs/job/{member.pk}/change/").content.decode()
    assert f'href="/admin/jobs/batch/{batch.pk}/change/"' in page


def test_home_shows_the_open_batches_with_progress(client, login, batch):  # noqa: F811
    finished, _ = batch_create(key="done-already", name="yesterday's import", created_by="test")
    Batch.objects.filter(pk=finished.pk).update(finished_at=database_now())
    login("viewer")
    home = client.get("/admin/")
    assert [row["batch"].pk for row in home.context["open_batches"]] == [batch.pk]
    html = home.content.decode()
    assert 'id="open-batches"' in html and "nightly import" in html and "yesterday&#x27;s import" not in html
    assert 'aria-label="2 of 10 ended (done 2)"' in html
