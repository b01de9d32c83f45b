"""The fault drills' shared verdict (devtools/faults.py) on real jobs: what it counts as lost, open,
missing, duplicated and misreported — the numbers both drills fail on."""

from datetime import timedelta

import pytest

from devtools import faults
from jobs import leases
from jobs.models import Effect, database_now
from tests.support.pools import submit

pytestmark = pytest.mark.django_db(transaction=True)


def _verdict(correlation: str, submitted: int) -> faults.Verdict:
    from django.db import connection

    def query(statement, parameters):
        with connection.cursor() as cursor:
            cursor.execute(statement, parameters)
            return cursor.fetchall()

    return faults.verdict(query, correlations=[correlation], submitted=submitted)


def test_the_verdict_counts_what_each_job_went_through():
    correlation = "verdict-test"
    good, without_effect, misreported = (submit(correlation_id=correlation) for _ in range(3))
    submit(correlation_id=correlation, due_at=database_now() + timedelta(hours=1))  # never claimed: open
    submit(correlation_id="another-drill")  # not counted
    me = leases.WorkerIdentity.of_this_process(pool="crawl")
    claimed = {c.id: c for c in leases.claim(pool="crawl", worker=me, lease_seconds=60, limit=10, start=True)}
    assert set(claimed) >= {good.id, without_effect.id, misreported.id}
    for job, effect_by, reported in ((good, 1, 1), (without_effect, None, 1), (misreported, 1, 2)):
        if effect_by:
            Effect.objects.create(key=f"synthetic:{job.id}", kind="synthetic", job=job, lease_version=effect_by)
        leases.complete(job.id, 1, actor=me.lease_owner, result_ref=f"synthetic:{job.id}:effect-by-attempt-{reported}")

    # Five were sent: one never arrived, one is still open.
    verdict = _verdict(correlation, submitted=5)
    assert (verdict.jobs, verdict.still_open, verdict.lost, verdict.not_completed) == (4, 1, 2, 1)
    assert (verdict.effects, verdict.effects_missing, verdict.effects_misreported) == (2, 1, 1)
    assert verdict.effects_duplicated == 0 and verdict.stale_writes_refused == 0
    assert verdict.failures() == [
        "jobs were lost (2)",
        "completed jobs have no effect (1)",
        "results name another attempt than the one that applied the effect (1)",
    ]


def test_a_drill_whose_jobs_all_completed_once_has_no_failures():
    correlation = "verdict-clean"
    job = submit(correlation_id=correlation)
    me = leases.WorkerIdentity.of_this_process(pool="crawl")
    (claimed,) = leases.claim(pool="crawl", worker=me, lease_seconds=60, limit=1, start=True)
    assert claimed.id == job.id
    Effect.objects.create(key=f"synthetic:{job.id}", kind="synthetic", job=job, lease_version=1)
    leases.complete(job.id, 1, actor=me.lease_owner, result_ref=f"synthetic:{job.id}:effect-by-attempt-1")
    verdict = _verdict(correlation, submitted=1)
    assert verdict.failures() == [] and verdict.lost == 0 and verdict.effects == 1
