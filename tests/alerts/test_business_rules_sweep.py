"""The business-rules sweep (alerts/business_rules_sweep.py): its interval from
``LEITSTAND_BUSINESS_RULES_SECONDS``, an empty round, and a round that opens a violation."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from alerts import business_rules_sweep
from alerts import options as alert_options
from alerts import options as alert_settings
from alerts.business_rules import RULES
from alerts.business_rules_sweep import RulesConfig
from alerts.models import RuleViolation
from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_the_interval_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_BUSINESS_RULES_SECONDS = 120
    assert RulesConfig.from_options(alert_options.current()) == replace(
        RulesConfig.from_options(alert_settings.current()), every_seconds=120
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_BUSINESS_RULES_SECONDS must be a number of at least 1"):
        replace(RulesConfig.from_options(alert_settings.current()), every_seconds=0.5)
    sweep = sweeps.get("business-rules")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is business_rules_sweep.run_once


def test_an_empty_round_finds_no_violation():
    report = business_rules_sweep.run_once(RulesConfig.from_options(alert_settings.current()))
    assert set(report) == set(RULES)
    assert all(found == {"open": 0, "new": 0, "resolved": 0} for found in report.values())


def test_a_round_opens_a_violation_and_resolves_it_when_its_subject_complies(make_job):
    crawl = job_in_state(make_job("crawl"), State.DONE)
    Job.objects.filter(pk=crawl.pk).update(finished_at=database_now() - timedelta(hours=25))
    child = make_job("analysis", parent_id=crawl.pk, payload={"candidate_id": 1})
    assert business_rules_sweep.run_once(RulesConfig.from_options(alert_settings.current()))["crawl_children_end"] == {
        "open": 1,
        "new": 1,
        "resolved": 0,
    }
    assert RuleViolation.objects.get(rule="crawl_children_end").subject == f"job {crawl.pk}"
    job_in_state(child, State.DONE)
    assert business_rules_sweep.run_once(RulesConfig.from_options(alert_settings.current()))["crawl_children_end"] == {
        "open": 0,
        "new": 0,
        "resolved": 1,
    }


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("business-rules").function.args == (RulesConfig.from_options(alert_options.current()),)
