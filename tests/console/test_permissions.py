"""The permission matrix: every console URL and action × each role → the expected answer and effect.

| | anonymous | viewer | reviewer | operator |
| --- | --- | --- | --- | --- |
| pages (home, lists, job page, review queue and case, stuck leases, audit log, paths, flow, business rules, batches, a job's export, API clients) | login | 200 | 200 | 200 |
| take a review case / decide it | login | 403 | allowed | 403 |
| job actions, release stuck leases, pause pools, bulk actions | login | refused | refused | allowed |
| add sources and assets | login | 403 | 403 | 200 |
| create, rotate and revoke API tokens (tests/api/test_clients.py) | login | refused | refused | allowed |
| end a recheck plan: manual decision / abort | login | — / — | allowed / — | allowed / allowed |
| alert routes: send a test, silence, review a dead-letter group, edit a route | login | refused | refused | allowed |
| confirm receipt of a route's test (the link) | login | allowed | allowed | allowed |
"""

import pytest
from django.urls import reverse

from dashboard.roles import OPERATORS, REVIEWERS, VIEWERS, roles_ensure
from jobs.models import Job, State
from tests.conftest import job_in_state
from tests.console.test_console import review_case
from workers.runtime.models import Pool

pytestmark = pytest.mark.django_db
ROLES = ["anonymous", VIEWERS, REVIEWERS, OPERATORS]


@pytest.fixture
def as_role(client, django_user_model):
    def login(role):
        if role != "anonymous":
            user = django_user_model.objects.create_user(f"u-{role}", password="x" * 12, is_staff=True)
            user.groups.add(roles_ensure()[role])
            client.force_login(user)
        return client

    return login


def pages(job, case):
    return [
        reverse("admin:index"),
        reverse("admin:review_queue"),
        reverse("admin:review_case", args=[case.id]),
        reverse("admin:stuck_leases"),
        reverse("admin:jobs_job_changelist"),
        reverse("admin:jobs_job_change", args=[job.id]),
        reverse("admin:jobs_auditentry_changelist"),
        reverse("admin:workers_finding_changelist"),
        reverse("admin:rechecks_recheckplan_changelist"),
        reverse("admin:workers_pool_changelist"),
        reverse("admin:workers_workerprocess_changelist"),
        reverse("admin:paths") + "?type=crawl",
        reverse("admin:flow"),
        reverse("admin:business_rules"),
        reverse("admin:jobs_batch_changelist"),
        reverse("admin:jobs_job_export", args=[job.id]),
        reverse("admin:jobs_client_changelist"),
        reverse("admin:jobs_client_token_new"),
        reverse("admin:alert_routes"),
        reverse("admin:alerts_silence_changelist"),
        reverse("admin:dashboard_deadletterreview_changelist"),
        reverse("admin:alerts_owner_changelist"),
        reverse("admin:alerts_route_changelist"),
    ]


@pytest.mark.parametrize("role", ROLES)
def test_every_page_needs_a_login_and_every_role_may_look(as_role, role, make_job):
    client = as_role(role)
    job, case = make_job("crawl", pool="crawl"), review_case()
    for url in pages(job, case):
        response = client.get(url)
        expected = 302 if role == "anonymous" else 200
        assert response.status_code == expected, (role, url)
        if role == "anonymous":
            assert "/admin/login/" in response.url


@pytest.mark.parametrize("role,expected", [("anonymous", 302), (VIEWERS, 403), (REVIEWERS, 302), (OPERATORS, 403)])
def test_only_reviewers_take_and_decide_cases(as_role, role, expected):
    client = as_role(role)
    case = review_case()
    assert client.get(reverse("admin:review_next")).status_code == expected
    response = client.post(reverse("admin:review_case", args=[case.id]), {"verdict": "no_match", "reason": "r"})
    assert response.status_code == (302 if role in ("anonymous", REVIEWERS) else 403)
    assert Job.objects.get(pk=case.pk).state == (State.DONE if role == REVIEWERS else State.READY_FOR_REVIEW)


@pytest.mark.parametrize("role", ROLES)
def test_only_operators_act_on_jobs_leases_and_pools(as_role, role, make_job, worker):
    client = as_role(role)
    dead = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    client.post(reverse("admin:jobs_job_act", args=[dead.id]), {"action": "retry_now", "reason": "r"})
    planned = make_job("crawl", pool="crawl")
    client.post(reverse("admin:jobs_job_changelist"), {"action": "cancel_jobs", "_selected_action": [planned.id]})
    running = job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    stuck = client.post(reverse("admin:stuck_leases"), {"job": [str(running.id)], "reason": "r"})
    Pool.objects.get_or_create(name="crawl")
    client.post(
        reverse("admin:workers_pool_changelist"),
        {"action": "pause_pools", "_selected_action": ["crawl"], "reason": "r"},
    )
    is_operator = role == OPERATORS
    assert Job.objects.get(pk=dead.pk).state == (State.PLANNED if is_operator else State.DEAD)
    assert Job.objects.get(pk=running.pk).state == (State.PLANNED if is_operator else State.RUNNING)
    assert Job.objects.get(pk=planned.pk).state == (State.CANCELLED if is_operator else State.PLANNED)
    assert Pool.objects.get(name="crawl").is_paused is is_operator
    assert stuck.status_code == {"anonymous": 302, OPERATORS: 302}.get(role, 403)


@pytest.mark.parametrize("role,expected", [("anonymous", 302), (VIEWERS, 403), (REVIEWERS, 403), (OPERATORS, 200)])
def test_only_operators_add_sources_and_assets(as_role, role, expected):
    client = as_role(role)
    for model in ("source", "protectedasset"):
        assert client.get(reverse(f"admin:workers_{model}_add")).status_code == expected, model


@pytest.mark.parametrize(
    "url",
    [
        "/admin/jobs/job/?payload__icontains=x",
        "/admin/jobs/job/?error_message__iregex=.*",
        "/admin/jobs/attempt/?error_message__iregex=.*",
        "/admin/jobs/stepevent/?data__icontains=x",
        "/admin/workers/source/?base_url__regex=x",
    ],
)
def test_a_list_filters_only_by_what_it_offers(client, django_user_model, url):
    viewer = django_user_model.objects.create_user("vic", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    assert client.get(url).status_code == 400
    offered = "/admin/jobs/job/?state__exact=dead&error_class=X&finished_at__gt=2026-01-01T00:00:00%2B00:00&step=fetch"
    assert client.get(offered).status_code == 200
    assert client.get("/admin/workers/finding/?candidate__source__id__exact=1").status_code == 200


@pytest.mark.parametrize("role", ROLES)
def test_only_operators_test_routes_silence_review_dead_letters_and_edit_routes(as_role, role, make_job, settings):
    from alerts.models import ReceiptTest, Route, Silence
    from alerts.routes import routes_ensure
    from dashboard.models import DeadLetterReview
    from jobs.models import AuditEntry

    settings.LEITSTAND_ALERT_ROUTES = {"operations": {"email": ["ops@example.org"]}}
    routes_ensure(set())
    route = Route.objects.get(name="operations")
    dead = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    Job.objects.filter(pk=dead.pk).update(error_class="httpx.ConnectError")
    client = as_role(role)
    routes = reverse("admin:alert_routes")
    client.post(routes, {"action": "test", "route": str(route.pk)})
    client.post(routes, {"action": "silence", "rule": "dlq_growth", "minutes": "60", "reason": "work"})
    client.post(
        reverse("admin:dead_letters"),
        {"type": "crawl", "error_class": "httpx.ConnectError", "step": "", "decision": "watch", "note": "seen"},
    )
    edit = client.get(reverse("admin:alerts_route_change", args=[route.pk]))
    allowed = role == OPERATORS
    assert ReceiptTest.objects.exists() == allowed, role
    assert Silence.objects.exists() == allowed, role
    assert DeadLetterReview.objects.exists() == allowed, role
    assert edit.status_code == {"anonymous": 302, OPERATORS: 200}.get(role, 200), role
    if role != "anonymous":
        assert (b'name="_save"' in edit.content) == allowed, "others see the route read-only"
    assert AuditEntry.objects.filter(action="alert.silenced").exists() == allowed, role
