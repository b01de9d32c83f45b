"""The webhooks sweep (workers/runtime/webhook_sweep.py): its config, an empty round, and a round
that turns an outbox event into a delivery job when a webhook is set, or drops it when none is."""

import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.insert import job_insert
from jobs.models import Job, State, WebhookEvent
from workers.runtime import webhook_sweep
from workers.runtime.sweeps import Stage, sweeps
from workers.runtime.webhook_sweep import WebhookSweepConfig

pytestmark = pytest.mark.django_db(transaction=True)


def done_job(pool_runtime) -> Job:
    job = job_insert(
        type="synthetic", pool="crawl", idempotency_key=uuid.uuid4().hex, payload={"settle": True}, actor="t"
    ).job
    pool_runtime("crawl").wake()
    assert Job.objects.get(pk=job.pk).state == State.DONE
    return job


def test_defaults_and_a_bad_limit():
    assert WebhookSweepConfig() == WebhookSweepConfig(limit=1000, every_seconds=0)
    with pytest.raises(ImproperlyConfigured, match="the webhooks sweep's limit must be a whole number"):
        WebhookSweepConfig(limit="all")
    sweep = sweeps.get("webhooks")
    assert sweep.stage == Stage.PLAN and sweep.function.func is webhook_sweep.run_once
    assert sweep.function.args == (WebhookSweepConfig(),), "registered with its config"


def test_an_empty_round_delivers_nothing():
    assert webhook_sweep.run_once(WebhookSweepConfig()) == 0


def test_an_event_becomes_one_delivery_and_without_a_webhook_is_dropped(pool_runtime, settings):
    settings.LEITSTAND_WEBHOOK = {"url": "https://core.example/hook", "secret": "s", "events": ["job.done"]}
    job = done_job(pool_runtime)
    assert WebhookEvent.objects.filter(job_id=job.pk, kind="job.done").exists()
    assert webhook_sweep.run_once(WebhookSweepConfig()) == 1
    assert webhook_sweep.run_once(WebhookSweepConfig()) == 0, "the event left the outbox"
    assert Job.objects.filter(type="api_webhook").count() == 1

    settings.LEITSTAND_WEBHOOK = {"url": "", "secret": "", "events": []}
    unheard = done_job(pool_runtime)
    assert webhook_sweep.run_once(WebhookSweepConfig()) == 0
    assert not WebhookEvent.objects.filter(job_id=unheard.pk).exists(), "nobody receives it: dropped"
