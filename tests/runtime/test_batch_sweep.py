"""The batches sweep (workers/runtime/batch_sweep.py): its config, an empty round, and a round that
finalizes a batch once its every member has ended — once, with its ``batch.finished`` event."""

import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.batches import batch_create
from jobs.insert import job_insert
from jobs.models import Batch, WebhookEvent
from workers.runtime import batch_sweep
from workers.runtime.batch_sweep import BatchConfig
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db(transaction=True)


def test_defaults_and_a_bad_limit():
    assert BatchConfig() == BatchConfig(limit=100, every_seconds=0)
    with pytest.raises(ImproperlyConfigured, match="the batches sweep's limit must be a whole number of at least 1"):
        BatchConfig(limit=-3)
    sweep = sweeps.get("batches")
    assert sweep.stage == Stage.PLAN and sweep.function.func is batch_sweep.run_once
    assert sweep.function.args == (BatchConfig(),), "registered with its config"
    assert [s.name for s in sweeps.in_order()].index("batches") < [s.name for s in sweeps.in_order()].index(
        "webhooks"
    ), "a finished batch's event reaches the outbox in the same round"


def test_an_empty_round_finalizes_nothing():
    assert batch_sweep.run_once(BatchConfig()) == 0


def test_a_batch_is_finalized_once_when_its_members_have_ended(pool_runtime, settings):
    settings.LEITSTAND_WEBHOOK = {"url": "https://core.example/hook", "secret": "s", "events": ["batch.finished"]}
    batch, _ = batch_create(key=uuid.uuid4().hex, name="two", created_by="test")
    for _ in range(2):
        job_insert(
            type="synthetic",
            pool="crawl",
            idempotency_key=uuid.uuid4().hex,
            payload={"settle": True},
            actor="t",
            batch_id=batch.pk,
        )
    assert batch_sweep.run_once(BatchConfig()) == 0, "its members are open"
    pool_runtime("crawl").wake()
    assert batch_sweep.run_once(BatchConfig()) == 1
    assert batch_sweep.run_once(BatchConfig()) == 0, "once"
    assert Batch.objects.get(pk=batch.pk).finished_at is not None
    assert WebhookEvent.objects.filter(kind="batch.finished").count() == 1
