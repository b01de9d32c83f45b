"""A batch run by real pool processes: four workers in two `runpool` processes complete its members
concurrently; the counters are read while it runs (progress is visible before the end), equal a
recount of the members' states at every read after the end, and the control process finalizes the
batch exactly once."""

import uuid

import pytest

from jobs.batches import batch_create, batch_progress
from jobs.models import Batch, Job, WebhookEvent
from tests.support.pools import PoolProcesses, wait_for
from workers.runtime.services import job_submit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]
MEMBERS = 240


def recount(batch):
    states = {}
    for state in Job.objects.filter(batch=batch).values_list("state", flat=True):
        states[state] = states.get(state, 0) + 1
    return {
        "total": sum(states.values()),
        "done": states.get("done", 0),
        "dead": states.get("dead", 0),
        "in_review": states.get("ready_for_review", 0),
        "failed": states.get("failed", 0),
    }


def test_counters_stay_exact_under_concurrent_completions_and_the_batch_ends_once(tmp_path, settings):
    batch, _ = batch_create(key=f"e2e-{uuid.uuid4().hex[:6]}", name="e2e", created_by="test")
    for n in range(MEMBERS):
        payload = {"pool": "crawl", "settle": True, "duration_ms": 20, "steps": ["work"]}
        if n % 20 == 0:
            payload = {"pool": "crawl", "fail": "permanent"}
        elif n % 30 == 1:
            payload = {"pool": "crawl", "fail": "unclear"}
        job_submit(
            job_type="synthetic", payload=payload, idempotency_key=f"{batch.key}-{n}", actor="test", batch_id=batch.pk
        )
    assert batch_progress(batch.pk).total == MEMBERS

    # The batch's end is announced by webhook: the delivery job is made, not sent (no notify pool here).
    processes = PoolProcesses(
        str(tmp_path / "run"),
        LEITSTAND_WEBHOOK_URL="http://127.0.0.1:9/hook",
        LEITSTAND_WEBHOOK_SECRET="s",
        LEITSTAND_WEBHOOK_EVENTS="batch.finished",
    )
    try:
        processes.start("control")
        processes.start("crawl")
        processes.start("crawl", key="crawl-2")  # a second process of the same pool: concurrent completions
        seen_midway = wait_for(
            lambda: (lambda p: p if 0 < p.done < MEMBERS - 20 else None)(batch_progress(batch.pk)),
            timeout=60,
            interval=0.05,
            message="progress visible while the batch runs",
        )
        assert seen_midway.done > 0 and Batch.objects.get(pk=batch.pk).finished_at is None
        wait_for(lambda: Batch.objects.get(pk=batch.pk).finished_at, timeout=120, message="the batch to finish")
        processes.check_running()
    finally:
        processes.stop_all()

    progress = batch_progress(batch.pk)
    counted = recount(batch)
    assert {name: getattr(progress, name) for name in counted} == counted
    assert counted == {"total": MEMBERS, "done": MEMBERS - 12 - 8, "dead": 12, "in_review": 8, "failed": 0}
    batch.refresh_from_db()
    assert batch.stats["total"] == MEMBERS and batch.stats["dead"] == 12
    deliveries = Job.objects.filter(type="api_webhook")
    assert [d.payload["event"]["batch"]["id"] for d in deliveries] == [batch.pk], "one batch.finished webhook"
    assert deliveries.get().payload["event"]["batch"]["counters"]["done"] == MEMBERS - 20
    assert not WebhookEvent.objects.exists(), "the outbox was emptied into that delivery job"
