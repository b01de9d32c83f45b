"""One bad item never stops a sweep (issue 35): each of the console's sweeps is fed one poisoned item
among good ones, and the good ones are done; the bad one is recorded with its reason."""

import dataclasses

import pytest

from alerts import alert_rules, business_rules, evaluation, receipts
from alerts.models import Alert, ReceiptTest, Route
from dashboard.models import BulkOperation
from dashboard.operations import bulk
from jobs.models import AuditEntry, Job, State
from workers.runtime.models import WorkerProcess

pytestmark = pytest.mark.django_db


@pytest.fixture
def restore_rules():
    saved_alerts, saved_rules = dict(alert_rules.RULES), dict(business_rules.RULES)
    yield
    alert_rules.RULES.clear()
    alert_rules.RULES.update(saved_alerts)
    business_rules.RULES.clear()
    business_rules.RULES.update(saved_rules)


def test_an_alert_rule_that_fails_does_not_silence_the_others(settings, make_job, db_clock, restore_rules):
    settings.LEITSTAND_ALERTS = {
        rule: {**config, "for_seconds": 0, "clear_seconds": 0} for rule, config in settings.LEITSTAND_ALERTS.items()
    }
    alert_rules.rule_memory.clear()

    def explode(now, memory):
        raise ValueError("a scope the table refuses")

    bad = dataclasses.replace(alert_rules.RULES["pool_no_consumers"], name="broken_rule", evaluate=explode)
    everything = dict(alert_rules.RULES)
    alert_rules.RULES.clear()
    alert_rules.RULES.update({"broken_rule": bad, **everything})
    settings.LEITSTAND_ALERTS = {
        **settings.LEITSTAND_ALERTS,
        "broken_rule": settings.LEITSTAND_ALERTS["pool_no_consumers"],
    }
    make_job("crawl", pool="crawl")
    WorkerProcess.objects.create(host="host-a", pid=1, pool="crawl", stopped_at=db_clock.now(), stop_reason="SIGTERM")
    report = evaluation.alerts_evaluate(now=db_clock.now())
    assert report["failed_rules"] == ["broken_rule"]
    assert Alert.objects.filter(rule="pool_no_consumers", state="firing").exists(), "the rules after it still fire"
    # The broken rule is recorded as an alert of its own, with the reason, and resolves once mended.
    failing = Alert.objects.get(rule="alert_rule_failing", state="firing")
    assert failing.scope == "alert_rule:broken_rule" and "ValueError: a scope the table refuses" in failing.diagnosis
    alert_rules.RULES["broken_rule"] = dataclasses.replace(bad, evaluate=lambda now, memory: [])
    db_clock.advance(1)
    assert evaluation.alerts_evaluate(now=db_clock.now())["failed_rules"] == []
    assert Alert.objects.get(pk=failing.pk).state == "resolved"


def test_a_business_rule_that_fails_does_not_stop_the_others(settings, restore_rules):
    def explode(now, config):
        raise ValueError("broken")

    first_name = next(iter(business_rules.RULES))
    bad = dataclasses.replace(business_rules.RULES[first_name], name="broken_rule", check=explode)
    everything = dict(business_rules.RULES)
    business_rules.RULES.clear()
    business_rules.RULES.update({"broken_rule": bad, **everything})
    settings.LEITSTAND_BUSINESS_RULES = {**settings.LEITSTAND_BUSINESS_RULES, "broken_rule": {}}
    report = business_rules.rules_evaluate()
    assert report["broken_rule"] == {"failed": "ValueError: broken"}
    assert set(report) == {"broken_rule", *everything} and all("open" in report[name] for name in everything)


def test_a_bulk_operation_that_cannot_run_fails_alone(make_job, db_clock):
    jobs = [make_job("crawl", pool="crawl") for _ in range(3)]
    common = {"action": "cancel", "high_water": db_clock.now(), "actor": "user:op", "reason": "r", "eligible": 3}
    broken = BulkOperation.objects.create(filter={"no_such_field": "x"}, **common)
    good = BulkOperation.objects.create(filter={"pool": "crawl"}, **common)
    bulk.bulk_step()
    bulk.bulk_step()
    broken.refresh_from_db()
    good.refresh_from_db()
    assert broken.state == BulkOperation.State.FAILED and broken.last_error.startswith("FieldError")
    assert good.state == BulkOperation.State.DONE and good.changed == 3
    assert {Job.objects.get(pk=j.pk).state for j in jobs} == {State.CANCELLED}
    assert AuditEntry.objects.filter(action="bulk.cancel.failed", result__contains="FieldError").exists()


def test_a_route_whose_test_cannot_be_sent_does_not_stop_the_others(monkeypatch):
    for name in ("first", "second", "third"):
        Route.objects.create(name=name, emails=[f"{name}@example.org"], test_every_hours=1)
    real = receipts.receipt_test_send

    def send(*, route, actor, now=None):
        if route.name == "second":
            raise ValueError("cannot queue")
        return real(route=route, actor=actor, now=now)

    monkeypatch.setattr(receipts, "receipt_test_send", send)
    assert receipts.receipt_tests_send() == 2
    assert set(ReceiptTest.objects.values_list("route__name", flat=True)) == {"first", "third"}
