"""Batches in process: counters follow every member's transitions in the same transaction (also
children, retries out of dead, reviews), the batch is finalized exactly once with its statistics and
one webhook event; the sizing rule's arithmetic on measured figures."""

import math
from datetime import timedelta

import pytest
from django.db import connection, transaction

from jobs import leases
from jobs.batches import batch_create, batch_eta, batch_progress, batch_timeline, batches_finalize
from jobs.errors import ErrorKind
from jobs.models import Batch, Job, WebhookEvent, database_now
from jobs.services import JobInputError, job_confirm, job_retry_now
from workers.runtime.models import WorkerProcess
from workers.runtime.sizing import batch_size_recommendation

pytestmark = pytest.mark.django_db(transaction=True)


def recount(batch):
    states = {}
    for state in Job.objects.filter(batch=batch).values_list("state", flat=True):
        states[state] = states.get(state, 0) + 1
    return {
        "total": sum(states.values()),
        "done": states.get("done", 0),
        "failed": states.get("failed", 0),
        "dead": states.get("dead", 0),
        "in_review": states.get("ready_for_review", 0),
        "rechecking": states.get("recheck_due", 0),
        "cancelled": states.get("cancelled", 0),
    }


def counters(batch):
    progress = batch_progress(batch.pk)
    return {
        name: getattr(progress, name)
        for name in ("total", "done", "failed", "dead", "in_review", "rechecking", "cancelled")
    }


def test_counters_follow_every_transition_and_the_batch_finalizes_once(make_job, pool_runtime):
    batch, created = batch_create(key="b1", name="first", created_by="test")
    assert created and batch_create(key="b1", name="first", created_by="test")[1] is False
    jobs = [
        make_job("synthetic", pool="crawl", batch_id=batch.pk, payload=payload)
        for payload in [{}] * 6 + [{"fail": "permanent"}] * 2 + [{"fail": "unclear"}]
    ]
    outsider = make_job("synthetic", pool="crawl", payload={})
    assert counters(batch) == recount(batch) and counters(batch)["total"] == 9
    pool_runtime("crawl").wake()
    for job in jobs[:6]:
        job_confirm(job_id=job.pk, actor="test")
    leases.unclear_queue_for_review()
    assert (
        counters(batch)
        == recount(batch)
        == {"total": 9, "done": 6, "failed": 0, "dead": 2, "in_review": 1, "rechecking": 0, "cancelled": 0}
    )
    assert Job.objects.get(pk=outsider.pk).batch_id is None

    job_retry_now(job_id=jobs[6].pk, actor="test", reason="again")  # out of dead: the counter follows
    assert counters(batch)["dead"] == 1 and batches_finalize() == 0, "one member is open again"
    pool_runtime("crawl").wake()
    assert counters(batch) == recount(batch) and counters(batch)["dead"] == 2

    assert batches_finalize() == 1 and batches_finalize() == 0, "finalized exactly once"
    batch.refresh_from_db()
    assert (
        batch.finished_at is not None and batch.stats["total"] == 9 and batch.stats["failure_rate"] == round(2 / 9, 4)
    )
    assert batch.stats["throughput_per_hour"] > 0 and batch.stats["duration_seconds"] > 0
    (event,) = WebhookEvent.objects.filter(kind="batch.finished")
    assert event.batch_id == batch.pk and event.data["batch"]["counters"]["done"] == 6


def test_children_join_their_parent_s_batch(make_job):
    batch, _ = batch_create(key="b2", name="tree", created_by="test")
    parent = make_job("crawl", batch_id=batch.pk)
    child = make_job("analysis", parent_id=parent.pk, payload={"candidate_id": 1})
    assert child.batch_id == batch.pk and counters(batch)["total"] == 2


def test_a_rolled_back_transition_leaves_the_counters_alone(make_job):
    batch, _ = batch_create(key="b3", name="rollback", created_by="test")
    job = make_job("synthetic", pool="crawl", batch_id=batch.pk, payload={})
    with pytest.raises(RuntimeError), transaction.atomic():
        leases.transition_apply(job.pk, "cancel", actor="t", cause="cancelled: x", reason="x")
        raise RuntimeError("undo")
    assert counters(batch)["cancelled"] == 0 and counters(batch) == recount(batch)


def test_a_member_waiting_for_its_retry_leaves_failed_when_it_runs_again(make_job, worker, db_clock):
    batch, _ = batch_create(key="b4", name="retry", created_by="test")
    job = make_job("synthetic", pool="crawl", batch_id=batch.pk, payload={})
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=30, start=True)
    leases.fail(
        claimed.id,
        claimed.lease_version,
        actor="w",
        kind=ErrorKind.TRANSIENT,
        error_class="Flaky",
        message="try again",
        retry_delay_seconds=5,
    )
    assert counters(batch)["failed"] == 1 == recount(batch)["failed"]
    db_clock.advance(6)
    assert leases.retries_promote_due()
    assert counters(batch) == recount(batch) and counters(batch)["failed"] == 0, "the retry took it out of failed"
    assert Job.objects.get(pk=job.pk).state == "planned"


def test_the_same_key_with_other_contents_is_refused():
    batch_create(key="api-1", name="n", created_by="t", request={"jobs": [1]})
    assert batch_create(key="api-1", name="n", created_by="t", request={"jobs": [1]})[1] is False
    with pytest.raises(JobInputError, match="exists with other contents"):
        batch_create(key="api-1", name="n", created_by="t", request={"jobs": [2]})


def test_eta_and_timeline_from_the_members_changes(make_job, pool_runtime):
    batch, _ = batch_create(key="b4", name="eta", created_by="test")
    Batch.objects.filter(pk=batch.pk).update(
        created_at=database_now() - timedelta(minutes=10), target_finish_at=database_now() + timedelta(seconds=1)
    )
    batch.refresh_from_db()
    jobs = [make_job("synthetic", pool="crawl", batch_id=batch.pk, payload={}) for _ in range(4)]
    pool_runtime("crawl").wake()
    for job in jobs[:2]:
        job_confirm(job_id=job.pk, actor="test")
    now = database_now()
    eta = batch_eta(batch, batch_progress(batch.pk), now)
    assert eta["rate_per_minute"] == pytest.approx(2 / 10, rel=0.05)  # two ended in the batch's 10 minutes
    assert eta["eta"] == pytest.approx(now + timedelta(minutes=2 / eta["rate_per_minute"]), abs=timedelta(seconds=1))
    assert eta["misses_target"] is True
    bucket, series = batch_timeline(batch)
    assert bucket == timedelta(seconds=30) and sum(count for _, count in series) == 2  # 10 min in 24 bars


def test_the_sizing_rule_multiplies_the_measured_factors(make_job, pool_runtime, settings):
    for pid in (11, 12, 13):
        WorkerProcess.objects.create(host="h", pid=pid, pool="crawl")
    jobs = [make_job("synthetic", pool="crawl", payload={}) for _ in range(30)]
    pool_runtime("crawl").wake()
    # The attempts ended within the window, each with one second of handler time.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_attempt SET started_at = finished_at - interval '1 second' WHERE job_id = ANY(%s)",
            [[j.pk for j in jobs]],
        )
    sizing = batch_size_recommendation(pool="crawl", target_minutes=15, window_minutes=10)
    assert sizing.live_workers >= 3 and sizing.attempts == 30
    assert sizing.per_worker_per_minute == pytest.approx(30 / sizing.live_workers / 10)
    assert sizing.recommended == math.floor(sizing.live_workers * sizing.per_worker_per_minute * 15) == 45
    assert sizing.at_full_load_per_worker_per_minute == pytest.approx(60.0)
    text = "\n".join(sizing.explain())
    assert "= 45" in text and "30 attempts ended in the last 10 min" in text
    with pytest.raises(JobInputError, match="unknown pool 'nowhere'"):
        batch_size_recommendation(pool="nowhere", target_minutes=15)


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["key", "name"])
def test_a_batch_key_or_name_with_a_line_break_is_refused(field):
    """Keys and names are logged: a line break would forge a log line."""
    from jobs.batches import batch_create
    from jobs.services import JobInputError

    fields = {"key": "k-1", "name": "import", field: "one\nforged: line"}
    with pytest.raises(JobInputError, match=f"^{field}: must contain printable characters"):
        batch_create(created_by="t", **fields)
