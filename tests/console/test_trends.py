"""Trends (issue 20): the control process records one row per job type and minute — open counts,
the oldest due job and run times from the snapshot, the jobs that ended in that minute — once per
minute, keeps them for their retention, and the console draws the series over 1 h / 24 h / 7 d."""

from datetime import timedelta

import pytest
from django.urls import reverse

from dashboard.models import Rollup
from dashboard.operations.snapshot import snapshot_refresh
from dashboard.operations.trends import rollups_record, trend_series
from dashboard.roles import VIEWERS
from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from tests.console.test_console import login  # noqa: F401  (fixture)


@pytest.fixture
def last_minute(db):
    now = database_now()
    return now.replace(second=0, microsecond=0) - timedelta(minutes=1)


def test_a_minute_is_recorded_once_per_type_with_what_ended_in_it(make_job, last_minute, settings):
    for _ in range(3):
        make_job("crawl", pool="crawl")
    ended = [job_in_state(make_job("crawl", pool="crawl"), state) for state in (State.DONE, State.DONE, State.DEAD)]
    Job.objects.filter(pk__in=[j.pk for j in ended]).update(finished_at=last_minute + timedelta(seconds=20))
    job_in_state(make_job("analysis", pool="analysis"), State.RUNNING)
    snapshot_refresh()
    assert rollups_record(keep_days=8) == 2 and rollups_record(keep_days=8) == 0, "once per minute"
    crawl = Rollup.objects.get(job_type="crawl")
    assert (crawl.minute, crawl.due, crawl.done, crawl.dead, crawl.pool) == (last_minute, 3, 2, 1, "crawl")
    assert Rollup.objects.get(job_type="analysis").running == 1

    Rollup.objects.create(minute=last_minute - timedelta(days=9), job_type="crawl")
    Rollup.objects.filter(minute=last_minute).delete()
    rollups_record(keep_days=8)
    assert not Rollup.objects.filter(minute__lt=last_minute - timedelta(days=8)).exists(), "past its retention"


def test_the_series_sum_the_types_and_bucket_the_ranges(last_minute):
    for minutes_ago, job_type, due, done in ((1, "crawl", 4, 6), (1, "analysis", 2, 3), (2, "crawl", 10, 0)):
        Rollup.objects.create(
            minute=last_minute - timedelta(minutes=minutes_ago - 1), job_type=job_type, due=due, done=done, p95_ms=80
        )
    hour = trend_series(span="1h")
    assert hour["bucket_seconds"] == 60 and hour["due"] == [10.0, 6.0] and hour["done_per_min"] == [0.0, 9.0]
    assert hour["types"] == ["analysis", "crawl"] and hour["p95_ms"] == [80.0, 80.0]
    assert trend_series(job_type="analysis", span="1h")["due"] == [2.0]
    day = trend_series(span="24h")
    assert day["bucket_seconds"] == 600 and sum(day["done_per_min"]) > 0
    with pytest.raises(ValueError, match="range must be one of"):
        trend_series(span="1y")


def test_the_trends_endpoint_answers_json_to_those_who_may_see_jobs(client, login, last_minute):  # noqa: F811
    Rollup.objects.create(minute=last_minute, job_type="crawl", due=3)
    login(VIEWERS)
    answer = client.get(reverse("admin:trends"), {"range": "7d", "type": "crawl"}).json()
    assert answer["range"] == "7d" and answer["due"] == [3.0] and answer["bucket_seconds"] == 3600
    assert client.get(reverse("admin:trends"), {"range": "bad"}).status_code == 400
    home = client.get(reverse("admin:index")).content.decode()
    assert 'id="trends"' in home and "uPlot.iife.min.js" in home and 'data-range="24h"' in home
    client.logout()
    assert client.get(reverse("admin:trends")).status_code == 302, "login first"
