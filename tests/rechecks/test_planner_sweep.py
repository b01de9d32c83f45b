"""The recheck planner (rechecks/planner_sweep.py): its config, an empty round, and a round that
starts the due plans' checks — at most ``plans_per_round`` of them, one job per plan and check — and
goes on past a plan that cannot start (recorded on it). The whole cycle, with real recheck jobs
answering, is in test_plans.py."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.models import Job, database_now
from rechecks import options as recheck_options
from rechecks.models import RecheckPlan
from rechecks.planner_sweep import PlannerConfig, PlannerReport, run_once
from rechecks.services import plan_request
from tests.console.test_console import review_case

pytestmark = pytest.mark.django_db


def plans(count: int) -> list[RecheckPlan]:
    made = []
    for n in range(count):
        case = review_case(f"planned-{n}")
        made.append(plan_request(job=case, finding=case.findings.get(), content_hash="h"))
    RecheckPlan.objects.update(next_check_at=database_now() - timedelta(seconds=1))
    return made


def test_the_config_comes_from_the_settings_and_a_bad_value_names_its_setting(settings):
    settings.LEITSTAND_RECHECK_PLANS_PER_ROUND = 7
    config = PlannerConfig.from_options(recheck_options.current())
    assert (config.plans_per_round, config.every_seconds) == (7, 0)
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_RECHECK_PLANS_PER_ROUND must be a whole number"):
        replace(config, plans_per_round=0)


def test_an_empty_round_does_nothing():
    assert run_once(PlannerConfig.from_options(recheck_options.current())) == PlannerReport()


def test_a_round_starts_at_most_its_share_of_due_checks_once_each():
    made = plans(3)
    assert run_once(replace(PlannerConfig.from_options(recheck_options.current()), plans_per_round=2)).dispatched == 2
    assert run_once(replace(PlannerConfig.from_options(recheck_options.current()), plans_per_round=2)).dispatched == 1
    assert run_once(PlannerConfig.from_options(recheck_options.current())).dispatched == 0, (
        "each plan's check is started once"
    )
    checks = Job.objects.filter(type="recheck")
    assert sorted(checks.values_list("idempotency_key", flat=True)) == sorted(f"plan-{p.pk}:1" for p in made)


def test_a_plan_that_cannot_start_its_check_is_recorded_and_the_others_start(monkeypatch):
    from rechecks import planner_sweep

    made = plans(3)
    real = planner_sweep._check_start

    def start(plan):
        if plan.pk == made[1].pk:
            raise ValueError("a payload the engine refuses")
        real(plan)

    monkeypatch.setattr(planner_sweep, "_check_start", start)
    assert run_once(PlannerConfig.from_options(recheck_options.current())).dispatched == 2
    stuck = RecheckPlan.objects.get(pk=made[1].pk)
    assert stuck.next_check_at is not None and "a payload the engine refuses" in stuck.next_check_reason
