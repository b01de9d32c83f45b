"""Every service that changes state checks the acting person's permission itself, so a new caller (the
API, a command, a future page) cannot skip it: each is called here directly, as a viewer and as a
reviewer, and must refuse an operator's action and leave the state as it was (issue 17)."""

import pytest
from django.core.exceptions import PermissionDenied

from alerts import evaluation
from alerts.models import Alert
from dashboard.models import BulkOperation
from dashboard.operations import bulk
from dashboard.roles import OPERATORS, REVIEWERS, VIEWERS, roles_ensure
from jobs import services
from jobs.models import Job, State
from rechecks.services import plan_abort, plan_decide
from tests.conftest import job_in_state
from tests.console.test_audited_actions import a_plan, an_alert
from workers.pipeline.services import crawl_start, source_upsert
from workers.runtime.models import Pool
from workers.runtime.services import pool_pause, pool_resume

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(django_user_model):
    groups = roles_ensure()

    def make(role: str):
        user = django_user_model.objects.create_user(f"{role}-1", password="x" * 12, is_staff=True)
        user.groups.add(groups[role])
        return django_user_model.objects.get(pk=user.pk)  # fresh permission cache

    return make


# name → (what it acts on, the call with a user, how to read the state it must leave alone)
OPERATOR_ACTIONS = {
    "job_cancel": (
        lambda make_job: make_job(),
        lambda job, user: services.job_cancel(job_id=job.pk, actor="a", reason="r", user=user),
        lambda job: Job.objects.get(pk=job.pk).state,
    ),
    "job_confirm": (
        lambda make_job: job_in_state(make_job(), State.RESULT_STORED),
        lambda job, user: services.job_confirm(job_id=job.pk, actor="a", user=user),
        lambda job: Job.objects.get(pk=job.pk).state,
    ),
    "job_retry_now": (
        lambda make_job: job_in_state(make_job(), State.DEAD),
        lambda job, user: services.job_retry_now(job_id=job.pk, actor="a", reason="r", user=user),
        lambda job: Job.objects.get(pk=job.pk).state,
    ),
    "job_release": (
        lambda make_job: job_in_state(make_job(), State.RUNNING),
        lambda job, user: services.job_release(job_id=job.pk, actor="a", reason="r", user=user),
        lambda job: Job.objects.get(pk=job.pk).state,
    ),
    "job_send_to_review": (
        lambda make_job: job_in_state(make_job(), State.UNCLEAR),
        lambda job, user: services.job_send_to_review(job_id=job.pk, actor="a", reason="r", user=user),
        lambda job: Job.objects.get(pk=job.pk).state,
    ),
    "bulk_start": (
        lambda make_job: job_in_state(make_job(), State.DEAD),
        lambda job, user: bulk.bulk_start(
            action="retry_now", job_filter={"state": "dead"}, actor="a", reason="r", user=user
        ),
        lambda job: (Job.objects.get(pk=job.pk).state, BulkOperation.objects.count()),
    ),
    "alert_acknowledge": (
        lambda make_job: an_alert(),
        lambda alert, user: evaluation.alert_acknowledge(alert_id=alert.pk, actor="a", comment="c", user=user),
        lambda alert: Alert.objects.get(pk=alert.pk).state,
    ),
    "alert_resolve": (
        lambda make_job: an_alert(),
        lambda alert, user: evaluation.alert_resolve(alert_id=alert.pk, actor="a", comment="c", user=user),
        lambda alert: Alert.objects.get(pk=alert.pk).state,
    ),
    "plan_abort": (
        lambda make_job: a_plan(),
        lambda plan, user: plan_abort(plan_id=plan.pk, actor="a", reason="r", user=user),
        lambda plan: type(plan).objects.get(pk=plan.pk).state,
    ),
    "pool_pause": (
        lambda make_job: Pool.objects.get(name="crawl"),
        lambda pool, user: pool_pause(pool=pool.name, actor="a", reason="r", user=user),
        lambda pool: Pool.objects.get(pk=pool.pk).is_paused,
    ),
    "pool_resume": (
        lambda make_job: Pool.objects.filter(name="crawl").update(is_paused=True) and Pool.objects.get(name="crawl"),
        lambda pool, user: pool_resume(pool=pool.name, actor="a", reason="r", user=user),
        lambda pool: Pool.objects.get(pk=pool.pk).is_paused,
    ),
    "crawl_start": (
        lambda make_job: source_upsert(name="Galerie", base_url="https://galerie.example/"),
        lambda source, user: crawl_start(actor="a", sources=[source], user=user),
        lambda source: Job.objects.filter(type="crawl").count(),
    ),
}


@pytest.mark.parametrize("role", [VIEWERS, REVIEWERS])
@pytest.mark.parametrize("name", sorted(OPERATOR_ACTIONS))
def test_an_operators_service_refuses_a_viewer_and_a_reviewer(make_job, person, role, name):
    make_target, call, state = OPERATOR_ACTIONS[name]
    target = make_target(make_job)
    before = state(target)
    with pytest.raises(PermissionDenied):
        call(target, person(role))
    assert state(target) == before


@pytest.mark.parametrize("name", sorted(OPERATOR_ACTIONS))
def test_the_same_service_lets_an_operator_act(make_job, person, name):
    make_target, call, state = OPERATOR_ACTIONS[name]
    target = make_target(make_job)
    before = state(target)
    call(target, person(OPERATORS))
    assert state(target) != before


@pytest.mark.parametrize(
    "call",
    [
        lambda job, user: services.review_decide(job_id=job.pk, actor="a", reason="r", user=user),
        lambda job, user: services.review_escalate(job_id=job.pk, actor="a", reason="r", user=user),
    ],
    ids=["review_decide", "review_escalate"],
)
def test_a_reviewers_service_refuses_a_viewer(make_job, person, call):
    case = job_in_state(make_job(), State.READY_FOR_REVIEW)
    with pytest.raises(PermissionDenied):
        call(case, person(VIEWERS))
    assert Job.objects.get(pk=case.pk).state == State.READY_FOR_REVIEW


def test_a_plan_decision_needs_the_decide_permission(make_job, person):
    plan = a_plan()
    with pytest.raises(PermissionDenied):
        plan_decide(plan_id=plan.pk, actor="a", reason="r", user=person(VIEWERS))
    assert type(plan).objects.get(pk=plan.pk).state == plan.state
