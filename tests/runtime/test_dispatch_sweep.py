"""The dispatcher (workers/runtime/dispatch_sweep.py): its config, an empty round, and the wake-ups a
round sends — one per worker for due work, less those still waiting in the pool's queue."""

import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured
from django_q.models import OrmQ

from jobs.insert import job_insert
from workers.runtime import dispatch_sweep, options
from workers.runtime.dispatch_sweep import DispatchConfig
from workers.runtime.models import Pool

# Committed statements: the ORM broker counts a queued wake-up by its lock time against now().
pytestmark = pytest.mark.django_db(transaction=True)


def due(pool: str, count: int) -> None:
    for _ in range(count):
        job_insert(type="synthetic", pool=pool, idempotency_key=uuid.uuid4().hex, payload={}, actor="t")


def queued() -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in OrmQ.objects.values_list("key", flat=True):
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_the_bounds_are_the_pools_workers_and_a_bad_one_names_its_setting(settings):
    config = DispatchConfig.from_options(options.current())
    assert dict(config.bounds) == {pool: c["workers"] for pool, c in settings.LEITSTAND_POOLS.items()}
    assert config.every_seconds == 0, "every round"
    with pytest.raises(ImproperlyConfigured, match=r'LEITSTAND_POOLS\["crawl"\]\["workers"\] must be a whole number'):
        settings.LEITSTAND_POOLS = {"crawl": {"workers": 0}}  # refused with the runtime's options
    with pytest.raises(AttributeError):
        config.every_seconds = 1  # frozen: read once


def test_an_empty_round_sends_nothing():
    assert dispatch_sweep.run_once(DispatchConfig(bounds={"crawl": 2, "analysis": 2})) == {}
    assert queued() == {}


def test_due_work_gets_a_wake_up_per_worker_less_those_waiting_and_a_paused_pool_none():
    config = DispatchConfig(bounds={"crawl": 3, "analysis": 2, "recheck": 2})
    due("crawl", 5)
    due("analysis", 1)
    due("recheck", 4)
    Pool.objects.update_or_create(name="recheck", defaults={"is_paused": True})
    assert dispatch_sweep.run_once(config) == {"crawl": 3, "analysis": 1}
    assert queued() == {"crawl": 3, "analysis": 1}
    assert dispatch_sweep.run_once(config) == {}, "the wake-ups still waiting count"
    OrmQ.objects.filter(key="crawl").delete()  # fetched by the workers (or lost)
    assert dispatch_sweep.run_once(config) == {"crawl": 3}


def test_it_is_registered_as_the_dispatch_stage():
    from workers.runtime.sweeps import Stage, sweeps

    sweep = sweeps.get("dispatcher")
    assert sweep.stage == Stage.DISPATCH and sweep.function.func is dispatch_sweep.run_once
    assert sweep.function.args[0] == DispatchConfig.from_options(options.current())
