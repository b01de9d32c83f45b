"""Recheck plans end to end in this process: a real analysis match creates the plan, the planner
creates recheck jobs, the recheck pool runtime observes a real local server, and database time is
moved instead of slept. Deadline, manual decision, abort, lost checks and cases ended elsewhere."""

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from PIL import ImageOps

from jobs.models import Job, State, StepEvent, Transition, WebhookEvent
from jobs.services import JobInputError, job_cancel
from rechecks import options as recheck_settings
from rechecks.models import Observation, RecheckPlan
from rechecks.planner_sweep import PlannerConfig, run_once
from rechecks.services import plan_abort, plan_decide
from tests.support.scripted_server import ScriptedServer
from workers.pipeline import demoweb
from workers.pipeline.models import Candidate, Source
from workers.pipeline.services import asset_register
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)

IMAGE = ("image/png", demoweb.asset_png(2))
OTHER = ("image/png", demoweb.asset_png(3))
MIRRORED = ("image/png", demoweb.encode(ImageOps.mirror(demoweb.artwork(2)), "PNG"))
POLICY = {
    "target": "gone_or_changed",
    "first_delay_seconds": 60,
    "min_interval_seconds": 600,
    "max_interval_seconds": 2400,
    "widen_factor": 2.0,
    "early_seconds": 120,
    "jitter": 0.0,
    "confirmations_required": 2,
    "deadline_seconds": 86_400,
}


@pytest.fixture
def case(settings, pool_runtime):
    """A served copy of a protected asset, analysed into a match: its job waits in recheck_due."""
    settings.LEITSTAND_RECHECK = dict(POLICY)
    settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}

    def make(answers, first=IMAGE, for_browsers=None):
        server = ScriptedServer(
            {"/copy.png": [(200, *first), *[(s, *c) for s, c in answers]], "/copy2.png": [(200, *IMAGE)]},
            for_browsers=for_browsers,
        ).__enter__()
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [server.target]
        asset_register(name="Mohnfeld", owner_ref="RH-2", data=IMAGE[1])
        source = Source.objects.create(name="S", base_url=server.url("/"))
        candidate = Candidate.objects.create(image_url=server.url("/copy.png"), page_url=server.url("/"), source=source)
        analysis = job_submit(
            job_type="analysis",
            payload={"candidate_id": candidate.id},
            idempotency_key="a",
            actor="test",
            correlation_id="case-1",
        ).job
        pool_runtime("analysis").wake()
        made.append(server)
        return Job.objects.get(pk=analysis.pk)

    made = []
    yield make
    for server in made:
        server.__exit__()


def check(pool_runtime, db_clock, seconds):
    """Move database time on, let the planner create due checks and the recheck pool run them."""
    db_clock.advance(seconds)
    report = run_once(PlannerConfig.from_options(recheck_settings.current()))
    pool_runtime("recheck").wake()
    return report


@pytest.mark.parametrize(
    "to_the_crawler",
    [
        (404, ("text/html", b"gone")),
        (410, ("text/html", b"gone")),
        (200, ("text/html", b"<p>not found</p>")),
        (200, OTHER),
    ],
    ids=["404", "410", "soft-404", "placeholder"],
)
def test_a_removal_shown_to_the_crawler_alone_does_not_end_the_plan(case, pool_runtime, db_clock, to_the_crawler):
    """A site that shows LeitstandBot alone a removal (a 404, a "not found" page, a placeholder) and the
    image to everybody else: every answer that would confirm the removal is asked again at once as a
    browser would ask, and the browser's answer is the observation."""
    job = case([to_the_crawler], for_browsers={"/copy.png": (200, *IMAGE)})
    plan = RecheckPlan.objects.get(job=job)
    for seconds in (61, 1201, 2401):
        check(pool_runtime, db_clock, seconds)
    plan.refresh_from_db()
    observations = list(plan.observations.order_by("sequence"))
    assert [(o.http_status, o.kind) for o in observations] == [(200, "unchanged")] * 3
    status = to_the_crawler[0]
    assert {o.detail for o in observations} == {f"the site answered LeitstandBot {status}, a browser 200"}
    assert plan.state == "active", "never 'target confirmed' on the crawler's word alone"
    fetch = StepEvent.objects.filter(job__type="recheck", step="fetch").order_by("id").last()
    assert (fetch.data["answered_the_crawler"], fetch.data["second_opinion"]) == (status, 200)


def test_an_answer_that_is_no_removal_is_not_asked_again(case, pool_runtime, db_clock):
    """A 503 says "come back later", not "gone": no second request is sent to a site under load."""
    job = case([(503, ("text/html", b"busy"))], for_browsers={"/copy.png": (200, *IMAGE)})
    check(pool_runtime, db_clock, 61)
    fetch = StepEvent.objects.filter(job__type="recheck", step="fetch").get()
    assert fetch.data["status"] == 503 and "second_opinion" not in fetch.data
    assert RecheckPlan.objects.get(job=job).observations.get().kind == "server_error"


def test_a_second_opinion_that_does_not_see_the_copy_changes_nothing(case, pool_runtime, db_clock):
    """A browser answered 403 (a bot challenge) where the crawler got 404: the crawler's answer stands."""
    job = case([(404, ("text/html", b"gone"))], for_browsers={"/copy.png": (403, "text/html", b"challenge")})
    for seconds in (61, 121):
        check(pool_runtime, db_clock, seconds)
    plan = RecheckPlan.objects.get(job=job)
    assert [(o.http_status, o.kind) for o in plan.observations.order_by("sequence")] == [(404, "gone")] * 2
    assert plan.end_reason == "target_confirmed"


def test_a_match_is_rechecked_until_the_copy_is_confirmed_gone(case, pool_runtime, db_clock):
    job = case([(200, IMAGE), (404, ("text/html", b"gone")), (404, ("text/html", b"gone"))])
    assert job.state == State.RECHECK_DUE
    plan = RecheckPlan.objects.get(job=job)
    assert (plan.correlation_id, plan.url, plan.state, plan.next_check_reason) == (
        "case-1",
        job.findings.get().candidate.image_url,
        "active",
        "first check 1 min after the match",
    )
    assert check(pool_runtime, db_clock, 30).dispatched == 0, "not due before the first delay"
    for seconds in (31, 1201, 120):
        assert check(pool_runtime, db_clock, seconds).dispatched == 1
    plan.refresh_from_db()
    observations = list(plan.observations.order_by("sequence"))
    assert [(o.http_status, o.kind) for o in observations] == [(200, "unchanged"), (404, "gone"), (404, "gone")]
    assert [o.decision for o in observations] == [
        "unchanged 1×: interval widened 10 min → 20 min",
        "gone (1 of 2 confirmations): confirming in 2 min",
        "gone 2× in a row: target confirmed",
    ]
    assert observations[0].match_score == 1.0 and len(observations[0].content_hash) == 64
    assert (plan.state, plan.end_reason, plan.sequence, plan.case_settled) == ("ended", "target_confirmed", 3, True)
    job.refresh_from_db()
    assert (
        job.state == State.DONE
        and job.completion_reason == f"recheck plan {plan.id}: gone 2× in a row: target confirmed"
    )
    rechecks = Job.objects.filter(type="recheck").order_by("created_at")
    assert [r.idempotency_key for r in rechecks] == [f"plan-{plan.id}:{n}" for n in (1, 2, 3)]
    assert {(r.parent_id, r.correlation_id, r.state) for r in rechecks} == {(job.id, "case-1", State.DONE)}
    assert check(pool_runtime, db_clock, 10_000).dispatched == 0, "an ended plan plans nothing"


def test_a_mirrored_copy_is_rechecked_with_the_comparison_that_found_it(case, pool_runtime, db_clock):
    job = case([(200, MIRRORED), (200, OTHER)], first=MIRRORED)
    finding = job.findings.get()
    assert job.state == State.RECHECK_DUE and finding.evidence["variant"].startswith("mirrored")
    check(pool_runtime, db_clock, 61)
    check(pool_runtime, db_clock, 1201)
    observations = list(Observation.objects.order_by("sequence"))
    assert [o.kind for o in observations] == ["unchanged", "no_longer_matching"]
    assert observations[0].match_score == finding.score >= 0.9, "still the mirrored copy: not 'replaced'"
    assert observations[1].match_score < 0.75


def test_a_replaced_image_confirms_the_gone_or_changed_target(case, pool_runtime, db_clock):
    job = case([(200, OTHER), (200, ("text/html", b"<p>removed</p>"))])
    check(pool_runtime, db_clock, 61)
    check(pool_runtime, db_clock, 121)
    kinds = list(Observation.objects.order_by("sequence").values_list("kind", "detail"))
    assert kinds[0] == ("no_longer_matching", "")
    assert kinds[1][0] == "no_longer_matching" and kinds[1][1].startswith("no longer the image: ")
    job.refresh_from_db()
    assert job.state == State.DONE


def test_the_deadline_sends_the_case_to_review(case, pool_runtime, db_clock, settings):
    job = case([(200, IMAGE)])
    plan = RecheckPlan.objects.get(job=job)
    db_clock.advance(86_400 + 1)
    for _ in range(2):  # the overdue check runs at once and finds the deadline passed
        check(pool_runtime, db_clock, 1)
    plan.refresh_from_db()
    assert (plan.end_reason, plan.case_settled) == ("deadline_passed", True)
    assert plan.end_note == (
        "deadline passed: still not confirmed 1 d after the match (last seen: unchanged); a person decides"
    )
    job.refresh_from_db()
    assert job.state == State.READY_FOR_REVIEW
    assert Transition.objects.filter(job=job).order_by("id").last().cause == f"recheck plan {plan.id}: {plan.end_note}"


def test_a_manual_decision_and_an_abort_record_actor_and_reason(case, pool_runtime, django_user_model):
    decided, aborted = case([(200, IMAGE)]), None
    plan = RecheckPlan.objects.get(job=decided)
    reviewer = django_user_model.objects.create_user("rev", password="x" * 12)
    with pytest.raises(PermissionDenied):
        plan_decide(plan_id=plan.id, actor="user:rev", reason="taken down, confirmed by mail", user=reviewer)
    reviewer.user_permissions.add(Permission.objects.get(codename="decide_plan"))
    reviewer = django_user_model.objects.get(pk=reviewer.pk)
    with pytest.raises(JobInputError, match="reason: is required"):
        plan_decide(plan_id=plan.id, actor="user:rev", reason="  ", user=reviewer)
    plan = plan_decide(plan_id=plan.id, actor="user:rev", reason="taken down, confirmed by mail", user=reviewer)
    assert (plan.end_reason, plan.ended_by, plan.end_note) == (
        "manual_decision",
        "user:rev",
        "manual decision by user:rev: taken down, confirmed by mail",
    )
    decided.refresh_from_db()
    assert decided.state == State.DONE
    event = WebhookEvent.objects.get(kind="recheck_plan.ended", job_id=decided.pk)
    assert event.data | {"ended_at": None} == {
        "id": plan.id,
        "end_reason": "manual_decision",
        "ended_by": "user:rev",
        "note": plan.end_note,
        "ended_at": None,
        "checks": plan.sequence,
        "url": plan.url,
    }
    assert Transition.objects.filter(job=decided).order_by("id").last().actor == "user:rev"
    with pytest.raises(JobInputError, match="has already ended"):
        plan_abort(plan_id=plan.id, actor="user:op", reason="late")

    other = Candidate.objects.create(
        image_url=plan.url.replace("copy", "copy2"), page_url=plan.url, source=Source.objects.get()
    )
    aborted = job_submit(job_type="analysis", payload={"candidate_id": other.id}, idempotency_key="b", actor="test").job
    pool_runtime("analysis").wake()
    second = RecheckPlan.objects.get(job=aborted)
    second = plan_abort(plan_id=second.id, actor="user:op", reason="the rights holder withdrew the claim")
    aborted.refresh_from_db()
    assert (second.end_reason, aborted.state) == ("aborted", State.CANCELLED)
    assert aborted.completion_reason == (
        f"recheck plan {second.id}: aborted by user:op: the rights holder withdrew the claim"
    )


def test_a_check_whose_job_died_is_planned_again_and_a_case_ended_elsewhere_ends_its_plan(case, pool_runtime, db_clock):
    job = case([(200, IMAGE)])
    plan = RecheckPlan.objects.get(job=job)
    db_clock.advance(61)
    run_once(PlannerConfig.from_options(recheck_settings.current()))
    plan.refresh_from_db()
    lost = plan.current_job
    job_cancel(job_id=lost.id, actor="test", reason="drill")
    report = run_once(PlannerConfig.from_options(recheck_settings.current()))
    plan.refresh_from_db()
    assert report.retried == 1 and plan.current_job is None
    assert plan.next_check_reason == "check 1 ended cancelled without an observation (drill); trying again in 2 min"
    job_cancel(job_id=job.id, actor="user:op", reason="duplicate case")
    assert run_once(PlannerConfig.from_options(recheck_settings.current())).ended_elsewhere == 1
    plan.refresh_from_db()
    assert (plan.end_reason, plan.end_note) == ("aborted", "the case ended elsewhere: job cancelled (duplicate case)")


def test_a_stale_check_is_skipped_and_decides_nothing(case, pool_runtime, db_clock):
    job = case([(200, IMAGE)])
    plan = RecheckPlan.objects.get(job=job)
    stale = job_submit(
        job_type="recheck", payload={"plan_id": plan.id, "sequence": 7}, idempotency_key="s", actor="test"
    ).job
    pool_runtime("recheck").wake()
    stale.refresh_from_db()
    assert (stale.state, stale.completion_reason) == (State.DONE, f"skipped: plan {plan.id} moved on to check 0")
    assert not Observation.objects.exists()
