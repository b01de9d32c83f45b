"""The bulk-actions sweep (dashboard/operations/bulk_sweep.py): its config, an empty round, and rounds
that carry a running bulk operation through in batches of ``batch`` jobs."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard.models import BulkOperation
from dashboard.operations import bulk_sweep
from dashboard.operations.bulk import BATCH, bulk_start
from dashboard.operations.bulk_sweep import BulkSweepConfig
from dashboard.roles import OPERATORS, roles_ensure
from jobs.models import Job, State
from tests.conftest import job_in_state
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_defaults_and_a_bad_batch():
    assert BulkSweepConfig() == BulkSweepConfig(batch=BATCH, every_seconds=0)
    with pytest.raises(ImproperlyConfigured, match="the bulk-actions sweep's batch must be a whole number"):
        BulkSweepConfig(batch=0)
    sweep = sweeps.get("bulk-actions")
    assert sweep.stage == Stage.PLAN and sweep.function.func is bulk_sweep.run_once
    assert sweep.function.args == (BulkSweepConfig(),), "registered with its config"


def test_an_empty_round_changes_nothing():
    assert bulk_sweep.run_once(BulkSweepConfig()) == 0


def test_a_running_operation_is_carried_through_in_batches(make_job, django_user_model):
    dead = [job_in_state(make_job("crawl", pool="crawl"), State.DEAD) for _ in range(3)]
    operator = django_user_model.objects.create_user("olga", password="x" * 12, is_staff=True)
    operator.groups.add(roles_ensure()[OPERATORS])
    bulk_start(action="retry_now", job_filter={"type": "crawl"}, actor="olga", reason="mended", user=operator)
    assert bulk_sweep.run_once(BulkSweepConfig(batch=2)) == 2
    assert bulk_sweep.run_once(BulkSweepConfig(batch=2)) == 1
    assert bulk_sweep.run_once(BulkSweepConfig(batch=2)) == 0
    assert BulkOperation.objects.get().state == "done"
    assert {Job.objects.get(pk=job.pk).state for job in dead} == {State.PLANNED}
