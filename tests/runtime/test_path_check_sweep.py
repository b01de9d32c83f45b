"""The path-checks sweep (workers/runtime/path_check_sweep.py): its config, an empty round, and a
round that checks each ended attempt once against its type's expected paths."""

import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.insert import job_insert
from jobs.models import Attempt
from workers.runtime import path_check_sweep
from workers.runtime.path_check_sweep import PathCheckConfig
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db(transaction=True)


def test_defaults_and_a_bad_limit():
    assert PathCheckConfig() == PathCheckConfig(limit=1000, every_seconds=0)
    with pytest.raises(ImproperlyConfigured, match="the path-checks sweep's limit must be a whole number"):
        PathCheckConfig(limit=0)
    sweep = sweeps.get("path-checks")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is path_check_sweep.run_once
    assert sweep.function.args == (PathCheckConfig(),), "registered with its config"


def test_an_empty_round_checks_nothing():
    assert path_check_sweep.run_once(PathCheckConfig()) == {"checked": 0, "shadow_jobs": 0}


def test_each_ended_attempt_is_checked_once(pool_runtime):
    for _ in range(3):
        job_insert(type="synthetic", pool="crawl", idempotency_key=uuid.uuid4().hex, payload={}, actor="t")
    pool_runtime("crawl").wake()
    assert path_check_sweep.run_once(PathCheckConfig(limit=2)) == {"checked": 2, "shadow_jobs": 0}
    assert path_check_sweep.run_once(PathCheckConfig()) == {"checked": 1, "shadow_jobs": 0}
    assert path_check_sweep.run_once(PathCheckConfig()) == {"checked": 0, "shadow_jobs": 0}
    assert not Attempt.objects.filter(path_checked=False).exists()
