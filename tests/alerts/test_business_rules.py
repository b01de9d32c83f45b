"""Business rules across jobs: each rule's violation is detected on constructed records, resolves
when its subject complies, feeds the alert rule and shows in the console."""

from datetime import timedelta

import pytest

from alerts import evaluation
from alerts.business_rules import rules_evaluate
from alerts.models import Alert, RuleViolation
from jobs.models import Job, State, Transition, database_now
from rechecks.services import plan_request
from tests.conftest import job_in_state
from tests.console.test_console import login, review_case  # noqa: F401 (the fixture)
from workers.pipeline.models import Finding

pytestmark = pytest.mark.django_db


def open_violations(rule):
    return list(RuleViolation.objects.filter(rule=rule, resolved_at__isnull=True).values_list("subject", flat=True))


def test_a_match_without_a_recheck_plan_breaks_the_rule_until_it_gets_one():
    case = review_case("m1")
    finding = case.findings.get()
    Finding.objects.filter(pk=finding.pk).update(verdict="match", created_at=database_now() - timedelta(hours=2))
    young = review_case("m2")
    Finding.objects.filter(job=young).update(verdict="match")  # made just now: within the hour
    assert rules_evaluate()["match_has_plan"] == {"open": 1, "new": 1, "resolved": 0}
    assert open_violations("match_has_plan") == [f"finding {finding.pk}"]
    violation = RuleViolation.objects.get(rule="match_has_plan")
    assert violation.job_id == case.pk and "no recheck plan after 60 min" in violation.detail
    rules_evaluate()
    assert RuleViolation.objects.filter(rule="match_has_plan").count() == 1, "one open violation per subject"
    plan_request(job=case, finding=finding, content_hash="h")
    assert rules_evaluate()["match_has_plan"]["resolved"] == 1 and open_violations("match_has_plan") == []


def test_a_crawl_whose_children_do_not_end_in_time_breaks_the_rule(make_job):
    crawl = job_in_state(make_job("crawl"), State.DONE)
    Job.objects.filter(pk=crawl.pk).update(finished_at=database_now() - timedelta(hours=25))
    child = make_job("analysis", parent_id=crawl.pk, payload={"candidate_id": 1})
    rules_evaluate()
    (violation,) = RuleViolation.objects.filter(rule="crawl_children_end", resolved_at__isnull=True)
    assert violation.subject == f"job {crawl.pk}" and "1 children not ended yet (planned)" in violation.detail
    job_in_state(child, State.DONE)
    rules_evaluate()
    assert open_violations("crawl_children_end") == []


def test_a_review_decision_not_followed_by_the_job_s_end_breaks_the_rule(make_job):
    job = job_in_state(make_job("analysis", payload={"candidate_id": 1}), State.RESULT_STORED)
    Transition.objects.create(
        job=job,
        from_state=State.READY_FOR_REVIEW,
        to_state=State.DONE,
        lease_version=1,
        cause="decided: no match",
        actor="user:rev",
        at=database_now() - timedelta(hours=1),
    )
    rules_evaluate()
    (violation,) = RuleViolation.objects.filter(rule="decision_ends_the_job", resolved_at__isnull=True)
    assert "decided by user:rev" in violation.detail and "the job is result_stored" in violation.detail
    job_in_state(job, State.DONE)
    rules_evaluate()
    assert open_violations("decision_ends_the_job") == []


def test_open_violations_fire_the_alert_and_show_in_the_console(client, login, settings):  # noqa: F811
    settings.LEITSTAND_ALERTS = {
        **settings.LEITSTAND_ALERTS,
        "business_rule_violated": {**settings.LEITSTAND_ALERTS["business_rule_violated"], "for_seconds": 0},
    }
    case = review_case("m3")
    Finding.objects.filter(job=case).update(verdict="match", created_at=database_now() - timedelta(hours=3))
    rules_evaluate()
    evaluation.alerts_evaluate()
    alert = Alert.objects.get(rule="business_rule_violated")
    assert (alert.scope, alert.state) == ("rule:match_has_plan", Alert.State.FIRING)
    assert "1 open violation of “Every match finding gets a recheck plan”" in alert.diagnosis
    login("viewer")
    page = client.get("/admin/rules/").content.decode()
    assert 'Every match finding gets a recheck plan <span class="badge gone">1 open</span>' in page
    assert f'href="/admin/jobs/job/{case.pk}/change/"' in page
