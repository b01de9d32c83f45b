"""Alert rules on constructed data: each fires, names the facts, and resolves when its condition
clears; flap suppression; acknowledge and resolve audited; the console shows alerts and runbooks."""

from datetime import timedelta

import pytest
from django.urls import reverse

from alerts import alert_rules, evaluation
from alerts.models import Alert, AlertEvent
from dashboard.roles import OPERATORS, VIEWERS, roles_ensure
from jobs.models import AuditEntry, Job, StaleWrite, State
from jobs.services import JobInputError
from rechecks.models import RecheckPlan
from tests.conftest import job_in_state
from workers.pipeline import options as pipeline_settings
from workers.pipeline.models import Candidate, Source
from workers.pipeline.schedule_sweep import ScheduleSweepConfig, run_once
from workers.pipeline.services import source_upsert
from workers.runtime.models import WorkerProcess

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def immediate(settings):
    """Fire and resolve at once, unless a test sets the timing itself."""
    settings.LEITSTAND_ALERTS = {
        rule: {**config, "for_seconds": 0, "clear_seconds": 0} for rule, config in settings.LEITSTAND_ALERTS.items()
    }
    alert_rules.rule_memory.clear()


def open_alerts(rule):
    return {a.scope: a for a in Alert.objects.filter(rule=rule).exclude(state="resolved")}


def assert_clears(rules, now):
    """The conditions cleared (the data changed, or time moved past the window): the alerts resolve."""
    Job.objects.filter(state__in=(State.PLANNED, State.RUNNING, State.READY_FOR_REVIEW)).update(state=State.DONE)
    evaluation.alerts_evaluate(now=now)
    for rule in rules:
        assert not open_alerts(rule), rule
        assert Alert.objects.filter(rule=rule, state="resolved").exists(), rule


def rule_set(settings, rule: str, **values) -> None:
    """Override some of one rule's options (a new setting, so the console's options are read again)."""
    alerts_setting = settings.LEITSTAND_ALERTS
    settings.LEITSTAND_ALERTS = {**alerts_setting, rule: {**alerts_setting[rule], **values}}


def test_a_pool_without_consumers_but_due_jobs(make_job, db_clock):
    make_job("crawl", pool="crawl")
    WorkerProcess.objects.create(
        host="host-a", pid=4312, pool="crawl", stopped_at=db_clock.now(), stop_reason="SIGTERM"
    )
    evaluation.alerts_evaluate(now=db_clock.now())
    alert = open_alerts("pool_no_consumers")["pool:crawl"]
    assert alert.state == "firing" and alert.route == "operations"
    assert "crawl: 0 consumers since " in alert.diagnosis and "last worker host-a:4312 stopped at " in alert.diagnosis
    assert alert.diagnosis.endswith("after SIGTERM; 1 jobs due")
    WorkerProcess.objects.create(host="host-b", pid=1, pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    alert.refresh_from_db()
    assert alert.state == "resolved" and [e.kind for e in alert.events.order_by("id")] == ["fired", "resolved"]


def test_flap_suppression_holds_back_a_blip_and_a_short_clearing(settings, make_job, db_clock):
    rule_set(settings, "pool_no_consumers", for_seconds=60, clear_seconds=120)
    job = make_job("crawl", pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    assert open_alerts("pool_no_consumers")["pool:crawl"].state == "pending"
    Job.objects.filter(pk=job.pk).update(state=State.DONE)
    evaluation.alerts_evaluate(now=db_clock.now())
    assert not Alert.objects.exists(), "a blip that never held for 60 s leaves no alert"
    Job.objects.filter(pk=job.pk).update(state=State.PLANNED)
    start = db_clock.now()
    evaluation.alerts_evaluate(now=start)
    evaluation.alerts_evaluate(now=start + timedelta(seconds=61))
    assert open_alerts("pool_no_consumers")["pool:crawl"].state == "firing"
    Job.objects.filter(pk=job.pk).update(state=State.DONE)
    evaluation.alerts_evaluate(now=start + timedelta(seconds=70))
    evaluation.alerts_evaluate(now=start + timedelta(seconds=150))
    assert open_alerts("pool_no_consumers")["pool:crawl"].state == "firing", "clear for 80 s only"
    evaluation.alerts_evaluate(now=start + timedelta(seconds=191))
    assert not open_alerts("pool_no_consumers")


def test_queue_growing_and_oldest_due_age(make_job, db_clock):
    now = db_clock.now()
    for minute in range(0, 20, 5):
        make_job("crawl", pool="crawl")
        evaluation.alerts_evaluate(now=now + timedelta(minutes=minute, seconds=1))
    alert = open_alerts("queue_growing")["pool:crawl"]
    assert "crawl: due jobs grew from 1 to 4 over 15 min without falling once" in alert.diagnosis
    urgent = make_job("analysis", pool="analysis", priority=0)
    Job.objects.filter(pk=urgent.pk).update(due_at=now - timedelta(minutes=11))
    evaluation.alerts_evaluate(now=now)
    critical = open_alerts("oldest_due_age")["type:analysis:critical"]
    assert critical.diagnosis.startswith("analysis critical lane: the oldest due job waits 11 min (limit 10 min)")
    assert_clears(["queue_growing", "oldest_due_age"], now + timedelta(minutes=20))


def test_dead_letters_stuck_leases_and_stale_writes(make_job, db_clock, settings):
    now = db_clock.now()
    rule_set(settings, "dlq_growth", count=3)
    for _ in range(3):
        dead = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
        Job.objects.filter(pk=dead.pk).update(finished_at=now, error_class="workers.pipeline.fetching.PageGone")
    stuck = job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    Job.objects.filter(pk=stuck.pk).update(lease_owner="host-a:1/crawl", lease_expires_at=now - timedelta(minutes=5))
    rule_set(settings, "stale_writes_spike", count=2)
    for _ in range(2):
        StaleWrite.objects.create(
            job=stuck, lease_version=1, operation="heartbeat", at=now, current_lease_version=2, current_state="running"
        )
    evaluation.alerts_evaluate(now=now)
    assert open_alerts("dlq_growth")["type:crawl"].diagnosis == (
        "crawl: 3 jobs dead-lettered in the last 60 min; most often workers.pipeline.fetching.PageGone (3)"
    )
    assert "1 leases expired more than 10 s ago" in open_alerts("stuck_leases")["pool:crawl"].diagnosis
    assert "held by host-a:1/crawl" in open_alerts("stuck_leases")["pool:crawl"].diagnosis
    assert open_alerts("stale_writes_spike")["type:crawl"].diagnosis.startswith("crawl: 2 writes of stale attempts")
    assert_clears(["dlq_growth", "stuck_leases", "stale_writes_spike"], now + timedelta(hours=2))


def test_review_rechecks_quiet_sources_and_disks(make_job, db_clock, settings):
    now = db_clock.now()
    case = job_in_state(make_job("analysis", pool="analysis"), State.READY_FOR_REVIEW)
    Job.objects.filter(pk=case.pk).update(state_changed_at=now - timedelta(hours=25))
    source = Source.objects.create(name="Galerie", base_url="https://g.example/")
    Candidate.objects.create(image_url="https://g.example/a.png", page_url="p", source=source)
    Candidate.objects.filter(source=source).update(last_seen_at=now - timedelta(hours=50))
    WorkerProcess.objects.create(host="host-a", pid=1, pool="crawl", disk_free_bytes=2 * 2**30)
    evaluation.alerts_evaluate(now=now)
    assert open_alerts("review_backlog_age")[""].diagnosis.startswith("1 review cases open; the oldest waits 25.0 h")
    assert open_alerts("review_backlog_age")[""].route == "review"
    assert open_alerts("source_quiet")["source:Galerie"].diagnosis.startswith("Galerie: no candidate seen for 2.1 d")
    assert open_alerts("disk_low")["host:host-a"].diagnosis == "host-a: 2.0 GiB free on the data disk (limit 5.0 GiB)"
    assert not RecheckPlan.objects.exists() and not open_alerts("rechecks_overdue")
    Candidate.objects.filter(source=source).update(last_seen_at=now)
    WorkerProcess.objects.update(disk_free_bytes=50 * 2**30)
    assert_clears(["review_backlog_age", "source_quiet", "disk_low"], now)


def test_acknowledge_and_resolve_need_a_comment_and_are_audited(make_job, db_clock, client, django_user_model):
    make_job("crawl", pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    alert = open_alerts("pool_no_consumers")["pool:crawl"]
    with pytest.raises(JobInputError, match="comment: is required"):
        evaluation.alert_acknowledge(alert_id=alert.pk, actor="user:op", comment=" ", user=None)
    operator = django_user_model.objects.create_user("op", password="x" * 12, is_staff=True)
    operator.groups.add(roles_ensure()[OPERATORS])
    client.force_login(operator)
    url = reverse("admin:alerts_alert_act", args=[alert.pk])
    client.post(url, {"action": "acknowledge", "comment": "looking at host-a"})
    alert.refresh_from_db()
    assert (alert.state, alert.acknowledged_by) == ("acknowledged", "user:op")
    page = client.get(reverse("admin:alerts_alert_change", args=[alert.pk])).content.decode()
    assert 'id="alert-diagnosis"' in page and "looking at host-a" in page and 'id="alert-resolve"' in page
    client.post(url, {"action": "resolve", "comment": "pool restarted"})
    alert.refresh_from_db()
    assert alert.state == "resolved"
    assert list(AlertEvent.objects.filter(alert=alert).values_list("kind", "actor")) == [
        ("fired", "alert-evaluator"),
        ("acknowledged", "user:op"),
        ("resolved", "user:op"),
    ]
    assert list(AuditEntry.objects.values_list("action", "reason")) == [
        ("alert.acknowledged", "looking at host-a"),
        ("alert.resolved", "pool restarted"),
    ]


def test_the_home_shows_active_alerts_with_their_runbooks(make_job, db_clock, client, django_user_model):
    make_job("crawl", pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    viewer = django_user_model.objects.create_user("v", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    home = client.get(reverse("admin:index")).content.decode()
    assert (
        'id="alerts"' in home
        and "pool_no_consumers" in home
        and reverse("admin:runbook", args=["pool_no_consumers"]) in home
    )
    runbook = client.get(reverse("admin:runbook", args=["pool_no_consumers"])).content.decode()
    assert "systemctl start leitstand-pool@" in runbook
    assert '<article class="runbook" id="runbook"><h1>pool_no_consumers — ' in runbook, "rendered, not raw Markdown"
    assert client.get(reverse("admin:runbook", args=["no_such_rule"])).status_code == 404


def test_the_alerts_list_keeps_itself_current(make_job, db_clock, client, django_user_model):
    """The list polls its own URL (filters kept) and swaps in the rows of the answer: a resolved alert
    shows as resolved without a reload."""
    make_job("crawl", pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    viewer = django_user_model.objects.create_user("v", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    url = reverse("admin:alerts_alert_changelist") + "?rule__exact=pool_no_consumers"
    (alert,) = Alert.objects.filter(rule="pool_no_consumers")
    page = client.get(url).content.decode()
    assert f'data-live hx-get="{url}"' in page and 'hx-select="#alerts-rows"' in page
    assert f'data-key="alert:{alert.pk}">firing</span>' in page
    Alert.objects.filter(pk=alert.pk).update(state=Alert.State.RESOLVED)
    polled = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert '<div id="alerts-rows">' in polled and f'data-key="alert:{alert.pk}">resolved</span>' in polled


def test_markdown_is_rendered_with_html_escaped_and_no_script_links():
    from dashboard.templatetags.console import markdown

    rendered = markdown("# Title\n\n<script>alert(1)</script> [x](javascript:alert(1)) `code`\n\n| a |\n|---|\n| 1 |")
    assert "<h1>Title</h1>" in rendered and "<code>code</code>" in rendered and "<table>" in rendered
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered
    assert 'href="javascript:' not in rendered


def test_every_rule_has_a_runbook_and_settings():
    from django.conf import settings

    for rule in alert_rules.RULES:
        assert alert_rules.runbook(rule).startswith(f"# {rule} — ")
        assert {"for_seconds", "clear_seconds"} <= set(settings.LEITSTAND_ALERTS[rule])


def test_overdue_recheck_plans_fire_and_clear(db_clock):
    from rechecks.services import plan_request
    from tests.console.test_console import review_case

    case = review_case("overdue")
    plan = plan_request(job=case, finding=case.findings.get(), content_hash="h")
    now = db_clock.now()
    RecheckPlan.objects.filter(pk=plan.pk).update(next_check_at=now - timedelta(hours=2))
    evaluation.alerts_evaluate(now=now)
    alert = open_alerts("rechecks_overdue")[""]
    assert alert.diagnosis.startswith("1 recheck plans are more than 60 min overdue (the oldest since ")
    RecheckPlan.objects.filter(pk=plan.pk).update(next_check_at=now + timedelta(hours=1))
    evaluation.alerts_evaluate(now=now)
    assert not open_alerts("rechecks_overdue")


def test_a_source_whose_crawls_fail_is_overdue(db_clock):
    source = source_upsert(name="Archiv", base_url="http://127.0.0.1:9/", crawl_every_minutes=60)
    assert run_once(ScheduleSweepConfig.from_options(pipeline_settings.current())) == 1
    (run,) = Job.objects.filter(type="crawl")
    job_in_state(run, State.DEAD)  # the base page never answered
    db_clock.advance(2 * 3600 + 60)
    evaluation.alerts_evaluate(now=db_clock.now())
    diagnosis = open_alerts("crawl_overdue")["source:Archiv"].diagnosis
    assert diagnosis.startswith("Archiv: not crawled for 2.0 h — twice its interval is 2.0 h; its last run (crawl run ")
    Source.objects.filter(pk=source.pk).update(last_crawled_at=db_clock.now())
    assert_clears(["crawl_overdue"], db_clock.now())
