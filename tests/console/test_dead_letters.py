"""The dead-letter page: dead jobs grouped by type, error class and step, counted per window, with
first/last seen, versions and the newest message; links to the filtered jobs list and to the bulk
retry of a group; scoped to a batch on the batch page."""

from datetime import timedelta
from urllib.parse import urlparse

import pytest

from dashboard.operations import deadletters_sweep
from dashboard.operations.deadletters import dead_letter_groups, dead_letters_refresh
from dashboard.operations.snapshot import snapshot_refresh
from jobs.batches import batch_create
from jobs.models import Job, State, database_now
from jobs.paths import attempts_check
from tests.conftest import job_in_state
from tests.console.test_console import login  # noqa: F401 (the fixture)
from workers.runtime.registry import registry
from workers.runtime.sweeps import sweeps

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dead(make_job, pool_runtime):
    """Seven dead synthetic jobs, run for real by the crawl pool's runtime and judged by the path check:
    four failed permanently after the step ``store`` (one of them in a batch), three after ``parse``;
    their finishing times and versions are then spread, as a week of dead letters would be."""
    batch, _ = batch_create(key="night", name="night run", created_by="test")
    jobs = [
        make_job(
            "synthetic",
            pool="crawl",
            max_attempts=1,
            payload={"fail": "permanent", "steps": ["fetch", "store"]},
            batch_id=batch.pk if n == 0 else None,
        )
        for n in range(4)
    ]
    jobs += [
        make_job("synthetic", pool="crawl", max_attempts=1, payload={"fail": "permanent", "steps": ["fetch", "parse"]})
        for _ in range(3)
    ]
    pool_runtime("crawl").wake()
    assert Job.objects.filter(state=State.DEAD).count() == 7
    attempts_check({t.name: t.paths for t in registry.all()}, limit=100)
    now = database_now()
    for job, age in zip(
        jobs,
        (
            timedelta(minutes=10),
            timedelta(hours=2),
            timedelta(hours=30),
            timedelta(days=5),
            timedelta(minutes=20),
            timedelta(minutes=30),
            timedelta(minutes=40),
        ),
    ):
        Job.objects.filter(pk=job.pk).update(finished_at=now - age)
    # The handler version: the "parse" failures come only from the current one, the rest from an older one.
    current = registry.get("synthetic").processing_version
    Job.objects.filter(pk__in=[j.pk for j in jobs[:4]]).update(processing_version="synthetic@0")
    Job.objects.filter(pk__in=[j.pk for j in jobs[4:]]).update(processing_version=current)
    return {"jobs": jobs, "batch": batch, "now": now, "current": current}


def test_groups_count_each_window_and_mark_an_error_new_with_the_current_version(dead):
    groups = dead_letter_groups(now=dead["now"])
    assert [(g.type, g.step, g.total) for g in groups] == [("synthetic", "parse", 3), ("synthetic", "store", 4)]
    parse, store = groups
    assert parse.counts == [3, 3, 3, 3, 3] and store.counts == [1, 2, 2, 3, 4]
    assert store.error_class == parse.error_class and parse.error_name == parse.error_class.rsplit(".", 1)[-1]
    assert store.first_seen == dead["now"] - timedelta(days=5) and store.last_seen == dead["now"] - timedelta(
        minutes=10
    )
    assert store.newest_job_id == str(dead["jobs"][0].pk) and store.newest_message
    assert parse.new_with == dead["current"] and parse.version_list == [dead["current"]]
    assert store.new_with == "" and store.version_list == ["synthetic@0"]
    (in_batch,) = dead_letter_groups(batch_id=dead["batch"].pk, now=dead["now"])
    assert (in_batch.step, in_batch.total) == ("store", 1)


def test_the_page_links_each_count_to_the_jobs_it_counts(client, login, dead):  # noqa: F811
    login("viewer")
    page = client.get("/admin/deadletters/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<strong>7</strong> dead jobs" in html and f"new with {dead['current']}" in html
    assert "retry all" not in html, "a viewer is offered no action"
    store = next(g for g in page.context["groups"] if g.step == "store")
    within_3h = dict(zip(("1 h", "3 h"), store.links["windows"]))["3 h"]
    listed = client.get(within_3h)
    assert listed.status_code == 200 and listed.context["cl"].result_count == 2
    assert {str(j.pk) for j in listed.context["cl"].result_list} == {str(j.pk) for j in dead["jobs"][:2]}
    assert client.get(store.links["all"]).context["cl"].result_count == 4
    assert client.get("/admin/jobs/job/?step=parse").context["cl"].result_count == 3
    assert client.get("/admin/jobs/job/?step=Parse;").context["cl"].result_count == 0


def test_an_operator_retries_a_batch_group_through_the_bulk_dry_run(client, login, dead):  # noqa: F811
    login("operator")
    page = client.get(f"/admin/deadletters/?batch={dead['batch'].pk}")
    assert page.status_code == 200 and "Dead letters of batch night run" in page.content.decode()
    (group,) = page.context["groups"]
    retry = urlparse(group.links["retry"])
    preview = client.get(f"{retry.path}?{retry.query}")
    assert preview.status_code == 200 and preview.context["preview"]["eligible"] == 1
    assert preview.context["job_filter"]["batch"] == dead["batch"].pk
    batch_page = client.get(f"/admin/jobs/batch/{dead['batch'].pk}/change/").content.decode()
    assert 'id="batch-dead-letters"' in batch_page and f"/admin/deadletters/?batch={dead['batch'].pk}" in batch_page


def test_a_batch_that_does_not_exist_is_a_404_and_a_bad_bulk_batch_is_refused(client, login, db):  # noqa: F811
    login("operator")
    assert client.get("/admin/deadletters/?batch=999999").status_code == 404
    assert client.get("/admin/deadletters/?batch=x").status_code == 404
    assert "batch: must be an integer" in client.get("/admin/bulk/?state__exact=dead&batch=x").content.decode()
    assert "step: must be a step name" in client.get("/admin/bulk/?state__exact=dead&step=a'b").content.decode()


def test_no_dead_letters_says_so(client, login, db):  # noqa: F811
    login("viewer")
    assert "No dead job." in client.get("/admin/deadletters/").content.decode()


def test_home_links_the_dead_letters(client, login, db):  # noqa: F811
    login("viewer")
    assert 'href="/admin/deadletters/"' in client.get("/admin/").content.decode()


def test_the_page_reads_the_groups_the_control_process_stored(client, login, dead):  # noqa: F811
    login("viewer")
    first = client.get("/admin/deadletters/")
    assert "As of" in first.content.decode() and sum(g.counts[0] for g in first.context["groups"]) == 4
    Job.objects.filter(pk=dead["jobs"][4].pk).update(finished_at=dead["now"] - timedelta(days=2))
    assert sum(g.counts[0] for g in client.get("/admin/deadletters/").context["groups"]) == 4, "until the next refresh"
    sweep = sweeps.get("dead-letters")  # the control process's sweep, throttled
    assert sweep.function.func is deadletters_sweep.run_once and sweep.every_seconds > 0
    dead_letters_refresh()
    assert sum(g.counts[0] for g in client.get("/admin/deadletters/").context["groups"]) == 3


def test_dead_jobs_without_a_finishing_time_are_grouped_too(make_job, client, login):  # noqa: F811
    """The engine always writes finished_at with dead; a row without it (set up here) must not break the page."""
    job = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    Job.objects.filter(pk=job.pk).update(error_class="httpx.ConnectError", finished_at=None)
    dead_letters_refresh()
    login("viewer")
    (group,) = client.get("/admin/deadletters/").context["groups"]
    assert (group.total, group.counts, group.first_seen, group.newest_job_id) == (1, [0] * 5, None, str(job.pk))


def test_the_home_the_navigation_and_the_page_count_the_same_dead_letters(client, login, dead):  # noqa: F811
    """Counts agree across pages once the control process's sweeps have run: the home's dead (all and
    within the hour), the navigation's count and the dead-letter page's total and 1-h column."""
    snapshot_refresh()
    dead_letters_refresh()
    login("viewer")
    home = client.get("/admin/")
    types = home.context["snapshot"]["pipeline"]["types"]
    groups = client.get("/admin/deadletters/").context["groups"]
    assert sum(g.total for g in groups) == types["synthetic"]["states"]["dead"] == 7
    assert sum(g.counts[0] for g in groups) == types["synthetic"]["dead_1h"] == 4
    assert 'data-count="dead">Dead letters <span class="nav-count">7</span>' in home.content.decode()
