"""Every action of every console page writes its audit entry: the tests walk them all.

The walk of the list actions starts from the admin site itself, and the walk of the job page's
actions from its declaration (``JOB_ACTIONS``), so an action added without a case here fails a test.
(django-q2's and django-axes' own pages are not Leitstand's.)"""

import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.urls import reverse

from alerts.models import Alert
from dashboard.admin.jobs import JOB_ACTIONS
from jobs.models import AuditEntry, Job, State, database_now
from rechecks.services import plan_request
from tests.conftest import job_in_state
from workers.pipeline import demoweb
from workers.pipeline.models import Candidate, Finding
from workers.pipeline.services import asset_register, source_upsert
from workers.runtime.models import Pool
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db

LEITSTAND_APPS = {"jobs", "workers", "rechecks", "dashboard", "api"}


def a_plan():
    name, owner, data = demoweb.protected_assets()[0]
    asset, _ = asset_register(name=name, owner_ref=owner, data=data)
    source = source_upsert(name="Galerie", base_url="https://galerie.example/")
    candidate = Candidate.objects.create(
        image_url="https://galerie.example/a.png", page_url="https://galerie.example/", source=source
    )
    finding = Finding.objects.create(
        candidate=candidate, asset=asset, score=1.0, verdict="match", analysis_version="a@1"
    )
    job = job_submit(job_type="analysis", payload={"candidate_id": candidate.id}, idempotency_key="k", actor="t").job
    return plan_request(job=job, finding=finding, content_hash="h")


def an_alert():
    now = database_now()
    return Alert.objects.create(
        rule="pool_stalled",
        scope="pool:crawl",
        state=Alert.State.FIRING,
        first_seen=now,
        last_seen=now,
        fired_at=now,
        value=1,
        threshold=0,
        diagnosis="the crawl pool made no progress",
        route="default",
    )


# (model, action) → (a record it acts on, the extra form fields, the audit entry's action)
CASES = {
    ("jobs.job", "cancel_jobs"): (lambda make_job: make_job(), {}, "job.cancel"),
    ("jobs.job", "retry_jobs_now"): (lambda make_job: job_in_state(make_job(), State.DEAD), {}, "job.retry_now"),
    ("workers.pool", "pause_pools"): (
        lambda make_job: Pool.objects.get(name="crawl"),
        {"reason": "the site asked us to slow down"},
        "pool.pause",
    ),
    ("workers.pool", "resume_pools"): (
        lambda make_job: Pool.objects.get(name="crawl"),
        {"reason": "they are fine again"},
        "pool.resume",
    ),
    ("workers.source", "start_crawl"): (
        lambda make_job: source_upsert(name="Galerie Süd", base_url="https://sued.example/"),
        {},
        "source.crawl",
    ),
    ("rechecks.recheckplan", "decide_plans"): (
        lambda make_job: a_plan(),
        {"apply": "1", "reason": "seen"},
        "plan.decide",
    ),
    ("rechecks.recheckplan", "abort_plans"): (
        lambda make_job: a_plan(),
        {"apply": "1", "reason": "gone"},
        "plan.abort",
    ),
}


@pytest.fixture
def superuser(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="x" * 12)
    client.force_login(user)
    return user


def test_every_list_action_of_every_leitstand_page_has_a_case_here(superuser):
    request = RequestFactory().get("/")
    request.user = superuser
    found = {
        (model._meta.label_lower, name)
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label in LEITSTAND_APPS
        for name in model_admin.get_actions(request)
        if name != "delete_selected"
    }
    assert found == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda case: f"{case[0]}:{case[1]}")
def test_a_list_action_writes_its_audit_entry(client, superuser, make_job, case):
    model, action = case
    make_target, fields, audited_as = CASES[case]
    target = make_target(make_job)
    changelist = reverse(f"admin:{model.replace('.', '_')}_changelist")
    answer = client.post(changelist, {"action": action, "_selected_action": [target.pk], **fields}, follow=True)
    assert answer.status_code == 200
    (entry,) = AuditEntry.objects.filter(action=audited_as)
    assert entry.actor == "user:root" and entry.reason and not entry.result.startswith("refused"), entry.result


def test_a_refused_action_is_audited_with_the_refusal(client, superuser, make_job):
    done = job_in_state(make_job(), State.DONE)
    client.post(reverse("admin:jobs_job_changelist"), {"action": "cancel_jobs", "_selected_action": [done.pk]})
    (entry,) = AuditEntry.objects.filter(action="job.cancel")
    assert entry.target == f"job {done.pk}" and entry.result.startswith("refused: ")
    assert Job.objects.get(pk=done.pk).state == State.DONE


# The job page's actions: the state a job must be in for each to apply.
PAGE_CASES = {
    "retry_now": State.DEAD,
    "cancel": State.PLANNED,
    "confirm": State.RESULT_STORED,
    "release": State.RUNNING,
    "review": State.UNCLEAR,
    "reorder": State.PLANNED,
    "hold": State.PLANNED,
    "resume": State.HELD,
}
# What each action's form sends besides its reason (the move's lane select).
PAGE_FIELDS = {"reorder": {"priority": "0"}}


def test_every_action_of_the_job_page_has_a_case_here():
    assert set(JOB_ACTIONS) == set(PAGE_CASES)


@pytest.mark.parametrize("name", sorted(PAGE_CASES))
def test_a_job_page_action_writes_its_audit_entry(client, superuser, make_job, name):
    job = job_in_state(make_job(), PAGE_CASES[name])
    act = reverse("admin:jobs_job_act", args=[job.pk])
    client.post(act, {"action": name, "reason": "seen on the page", **PAGE_FIELDS.get(name, {})})
    (entry,) = AuditEntry.objects.filter(action=f"job.{name}")
    assert (entry.actor, entry.target, entry.reason) == ("user:root", f"job {job.pk}", "seen on the page")
    assert not entry.result.startswith("refused"), entry.result
    after = Job.objects.get(pk=job.pk)
    if name == "reorder":  # a move changes the job's place in line, not its state
        assert (after.state, after.priority) == (State.PLANNED, 0)
    else:
        assert after.state != PAGE_CASES[name]


def test_a_job_page_action_without_the_permission_is_refused_and_audited(client, make_job, django_user_model):
    from dashboard.roles import VIEWERS, roles_ensure

    viewer = django_user_model.objects.create_user("vera", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    job = make_job()
    client.post(reverse("admin:jobs_job_act", args=[job.pk]), {"action": "cancel", "reason": "try"})
    (entry,) = AuditEntry.objects.filter(action="job.cancel")
    assert entry.actor == "user:vera" and entry.result.startswith("refused: "), entry.result
    assert "jobs.operate_job" in entry.result
    assert Job.objects.get(pk=job.pk).state == State.PLANNED


def test_the_other_page_actions_write_their_audit_entries(client, superuser, make_job):
    stuck = job_in_state(make_job(), State.RUNNING)
    job_in_state(make_job(), State.DEAD)
    client.post(reverse("admin:stuck_leases"), {"job": [str(stuck.pk)], "reason": "worker gone"})
    client.post(
        reverse("admin:bulk") + "?state__exact=dead",
        {"action_name": "retry_now", "reason": "the fix is deployed", "confirm": "yes", "eligible": 1},
    )
    alert = an_alert()
    client.post(reverse("admin:alerts_alert_act", args=[alert.pk]), {"action": "acknowledge", "comment": "on it"})
    case = job_in_state(make_job(), State.READY_FOR_REVIEW)
    client.get(reverse("admin:review_case", args=[case.pk]))  # takes the case
    client.post(reverse("admin:review_case", args=[case.pk]), {"verdict": "no_match", "reason": "another picture"})
    audited = dict(AuditEntry.objects.values_list("action", "result"))
    assert audited["lease.release"] == "released: planned again, due now"
    assert audited["bulk.retry_now.start"]
    assert audited["alert.acknowledged"] == "acknowledged"
    assert not audited["review.no_match"].startswith("refused"), audited["review.no_match"]


@pytest.mark.parametrize("role", ["viewer", "reviewer"])
@pytest.mark.parametrize("name", sorted(PAGE_CASES))
def test_every_job_page_action_refuses_a_viewer_and_a_reviewer_on_the_one_path(
    client, make_job, django_user_model, role, name
):
    from dashboard.roles import roles_ensure

    person = django_user_model.objects.create_user("someone", password="x" * 12, is_staff=True)
    person.groups.add(roles_ensure()[role])
    client.force_login(person)
    job = job_in_state(make_job(), PAGE_CASES[name])
    client.post(
        reverse("admin:jobs_job_act", args=[job.pk]), {"action": name, "reason": "try", **PAGE_FIELDS.get(name, {})}
    )
    (entry,) = AuditEntry.objects.filter(action=f"job.{name}")
    assert entry.result.startswith("refused: ") and "jobs.operate_job" in entry.result
    assert Job.objects.get(pk=job.pk).state == PAGE_CASES[name]
    assert Job.objects.get(pk=job.pk).priority == job.priority


@pytest.mark.parametrize("role", ["viewer", "reviewer"])
@pytest.mark.parametrize("case", [c for c in sorted(CASES) if c[1] != "decide_plans"], ids=lambda c: f"{c[0]}:{c[1]}")
def test_every_operators_list_action_refuses_a_viewer_and_a_reviewer(client, make_job, django_user_model, role, case):
    from dashboard.roles import roles_ensure

    person = django_user_model.objects.create_user("someone", password="x" * 12, is_staff=True)
    person.groups.add(roles_ensure()[role])
    client.force_login(person)
    model, action = case
    make_target, fields, audited_as = CASES[case]
    target = make_target(make_job)
    before = type(target).objects.filter(pk=target.pk).values().get()
    changelist = reverse(f"admin:{model.replace('.', '_')}_changelist")
    client.post(changelist, {"action": action, "_selected_action": [target.pk], **fields})
    assert type(target).objects.filter(pk=target.pk).values().get() == before
    assert not AuditEntry.objects.filter(action=audited_as).exclude(result__startswith="refused").exists()


def test_moving_a_waiting_job_puts_it_where_the_operator_said_and_refuses_bad_input(
    client, superuser, make_job, worker
):
    from datetime import timedelta

    from django.utils import timezone

    from jobs import leases

    ahead = [make_job() for _ in range(3)]
    moved = make_job(priority=9)
    act = reverse("admin:jobs_job_act", args=[moved.pk])
    client.post(act, {"action": "reorder", "reason": "the customer is waiting", "priority": "1"})
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=30)
    assert claimed.id == moved.id, "lane 1 is claimed before the lane-5 jobs that were ahead of it"

    later = make_job()
    due = timezone.localtime(database_now() + timedelta(hours=2)).replace(microsecond=0, tzinfo=None)
    client.post(
        reverse("admin:jobs_job_act", args=[later.pk]),
        {"action": "reorder", "reason": "after the maintenance", "priority": "", "due_at": due.isoformat()},
    )
    later.refresh_from_db()
    assert later.due_at > database_now() + timedelta(hours=1) and later.priority == 5
    results = []
    for fields in (
        {"priority": "12"},
        {"priority": "x"},
        {"priority": "", "due_at": "tomorrow"},
        {"priority": "", "due_at": ""},
    ):
        before = Job.objects.get(pk=ahead[0].pk)
        client.post(reverse("admin:jobs_job_act", args=[ahead[0].pk]), {"action": "reorder", "reason": "r", **fields})
        after = Job.objects.get(pk=ahead[0].pk)
        assert (after.priority, after.due_at) == (before.priority, before.due_at)
        results.append(AuditEntry.objects.filter(action="job.reorder").order_by("-id").first().result)
    assert all(result.startswith("refused: ") for result in results), results
    running = job_in_state(make_job(), State.RUNNING)
    client.post(reverse("admin:jobs_job_act", args=[running.pk]), {"action": "reorder", "reason": "r", "priority": "0"})
    last = AuditEntry.objects.filter(action="job.reorder").order_by("-id").first().result
    assert last.startswith("refused: job: the job is running"), last
