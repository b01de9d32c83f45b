"""Table-driven from the django-fsm declaration: every declared transition works and every
undeclared (from, to) pair is refused, through every write path — the model methods and the lease
module's guarded SQL."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django_fsm import TransitionNotAllowed, can_proceed

from jobs import leases, services
from jobs.errors import ErrorKind
from jobs.models import Job, State, Transition
from jobs.retry import RetryPolicy
from tests.conftest import job_in_state

ALL_STATES = [s.value for s in State]
FIELD = Job._meta.get_field("state")
DECLARED = {(t.source, t.target, t.name) for t in FIELD.get_all_transitions(Job)}
DECLARED_PAIRS = {(source, target) for source, target, _ in DECLARED}
HUMAN = sorted({t.name for t in FIELD.get_all_transitions(Job) if not t.custom.get("engine")})


def test_the_declaration_is_what_the_design_names():
    assert set(ALL_STATES) == {
        "planned",
        "reserved",
        "running",
        "result_stored",
        "unclear",
        "ready_for_review",
        "recheck_due",
        "failed",
        "done",
        "dead",
        "cancelled",
        "held",  # issue 39: an operator took it out of line
    }
    assert {t for _, t, _ in DECLARED} | {"planned"} == set(ALL_STATES), "every state is reachable"
    assert not any(source in ("done", "cancelled") for source, _, _ in DECLARED), "done and cancelled are final"
    for t in FIELD.get_all_transitions(Job):
        if not t.custom.get("engine"):
            assert t.permission in ("jobs.operate_job", "jobs.review_job"), f"{t.name} is a human transition"


# --- path 1: the django-fsm methods themselves ------------------------------------------------


@pytest.mark.parametrize("name", sorted({name for _, _, name in DECLARED}))
@pytest.mark.parametrize("state", ALL_STATES)
def test_model_method_allows_exactly_the_declared_sources(state, name):
    job = Job(state=state, attempts=1, max_attempts=5)
    method = getattr(job, name)
    targets = {target for source, target, n in DECLARED if n == name and source == state}
    kwargs = {"reason": "table test"} if name in HUMAN else {}
    if targets:
        assert can_proceed(method)
        method(**kwargs)
        assert job.state in targets
    else:
        assert not can_proceed(method)
        with pytest.raises(TransitionNotAllowed):
            method(**kwargs)
        assert job.state == state


def test_the_retry_budget_condition_guards_fail_for_retry():
    job = Job(state=State.RUNNING, attempts=5, max_attempts=5)
    assert not can_proceed(job.fail_for_retry)
    assert can_proceed(job.dead_letter)


# --- path 2: the lease module's SQL, and transition_apply for human transitions ---------------

POLICY = RetryPolicy(base_seconds=1, cap_seconds=1)


def _engine_ops():
    """Each SQL write path with the declared transition it performs."""

    def fail(kind):
        return lambda job: leases.fail(job.id, 1, actor="t", kind=kind, error_class="E", message="m")

    return {
        "start": lambda job: leases.start(job.id, 1, actor="t"),
        "complete": lambda job: leases.complete(job.id, 1, actor="t"),
        "plan_recheck": lambda job: leases.complete(job.id, 1, actor="t", recheck=True),
        "flag_unclear": fail(ErrorKind.UNCLEAR),
        "fail_for_retry": fail(ErrorKind.TRANSIENT),
        "dead_letter": fail(ErrorKind.PERMANENT),
        "release": lambda job: leases.release(job.id, 1, actor="t", reason="table test"),
    }


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize("name", sorted(_engine_ops()))
def test_fenced_sql_allows_exactly_the_declared_sources(make_job, state, name):
    job = job_in_state(make_job(), state)
    before = Job.objects.values().get(pk=job.pk)
    expected = {target for source, target, n in DECLARED if n == name and source == state}
    if expected:
        result = _engine_ops()[name](job)
        assert {result.to_state} == expected
        assert Transition.objects.filter(job=job).last().to_state == result.to_state
    else:
        with pytest.raises((leases.StaleAttempt, TransitionNotAllowed)):
            _engine_ops()[name](job)
        assert Job.objects.values().get(pk=job.pk) == before


def test_a_transient_failure_without_budget_takes_dead_letter(make_job):
    job = job_in_state(make_job(max_attempts=1), State.RUNNING, attempts=1)
    assert leases.fail(job.id, 1, actor="t", kind=ErrorKind.TRANSIENT, error_class="E", message="m").to_state == "dead"


@pytest.mark.parametrize("state", ALL_STATES)
def test_claim_takes_only_declared_sources(make_job, worker, state):
    job = job_in_state(make_job(), state, lease_version=0, attempts=0)
    claimed = leases.claim(pool="crawl", worker=worker, lease_seconds=30)
    assert [c.id for c in claimed] == ([job.id] if state in leases.sources_of("claim") else [])


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize(
    "sweep,name",
    [
        (lambda: leases.reap_expired(grace_seconds=0, policy=POLICY), "fail_for_retry"),
        (lambda: leases.retries_promote_due(), "retry_due"),
        (lambda: leases.unclear_queue_for_review(), "queue_for_review"),
    ],
    ids=["reap", "retries_promote_due", "unclear_queue_for_review"],
)
def test_sweeps_take_only_declared_sources(make_job, db_clock, state, sweep, name):
    job = job_in_state(make_job(), state)
    # Make every time-based sweep eligible, so only the state decides.
    Job.objects.filter(pk=job.pk).update(lease_expires_at=db_clock.now(), next_attempt_at=db_clock.now())
    db_clock.advance(5)
    swept = sweep()
    expected = {target for source, target, n in DECLARED if n == name and source == state}
    # The review-queue sweep serves unclear jobs only: recheck_due jobs go to review via their plan.
    if name == "queue_for_review" and state == State.RECHECK_DUE:
        expected = set()
    assert {r.to_state for r in swept} == expected


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize("name", HUMAN)
def test_transition_apply_allows_exactly_the_declared_sources(make_job, state, name):
    job = job_in_state(make_job(), state)
    expected = {target for source, target, n in DECLARED if n == name and source == state}
    if expected:
        after = leases.transition_apply(job.id, name, actor="t", cause="table test", reason="table test")
        assert {after.state} == expected
        last = Transition.objects.filter(job=job).last()
        assert (last.from_state, last.to_state) == (state, after.state)
    else:
        with pytest.raises(TransitionNotAllowed, match=f"cannot {name}"):
            leases.transition_apply(job.id, name, actor="t", cause="table test", reason="table test")
        job.refresh_from_db()
        assert job.state == state


def test_transition_apply_refuses_engine_transitions(make_job):
    job = make_job()
    with pytest.raises(ValueError, match="job engine"):
        leases.transition_apply(job.id, "claim", actor="t", cause="x")


def _all_write_paths(worker):
    paths = dict(_engine_ops())
    paths["claim"] = lambda job: leases.claim(pool="crawl", worker=worker, lease_seconds=30)
    paths["claim_and_start"] = lambda job: leases.claim(pool="crawl", worker=worker, lease_seconds=30, start=True)
    paths["complete_many"] = lambda job: leases.complete_many([leases.Completion(job.id, 1)], actor="t")
    paths["complete_many_settled"] = lambda job: leases.complete_many(
        [leases.Completion(job.id, 1, settled="no match")], actor="t"
    )
    paths["reap"] = lambda job: leases.reap_expired(grace_seconds=0, policy=POLICY)
    paths["retries_promote_due"] = lambda job: leases.retries_promote_due()
    paths["unclear_queue_for_review"] = lambda job: leases.unclear_queue_for_review()
    paths["review_queue_job"] = lambda job: leases.review_queue_job(job.id, actor="t", cause="deadline passed")
    for name in HUMAN:
        paths[name] = lambda job, name=name: leases.transition_apply(job.id, name, actor="t", cause="t", reason="t")
    for name in ("retry_now", "cancel", "confirm"):  # the set-based forms bulk actions use
        paths[f"bulk_{name}"] = lambda job, name=name: leases.transition_many(
            name, [job.id], actor="t", cause="t", reason="t"
        )
    return paths


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize("name", ["retry_now", "cancel", "confirm"])
def test_bulk_transitions_take_exactly_the_declared_sources(make_job, state, name):
    job = job_in_state(make_job(), state)
    expected = {target for source, target, n in DECLARED if n == name and source == state}
    done = leases.transition_many(name, [job.id], actor="t", cause="bulk", reason="r")
    assert {r.to_state for r in done} == expected
    job.refresh_from_db()
    assert job.state == (expected.pop() if expected else state)


# What a human transition writes besides the state; the bulk form must write the same (the retry
# budget above all: "retry now" from the dead-letter queue gives a fresh one).
WRITTEN = (
    "state",
    "attempts",
    "next_attempt_at",
    "finished_at",
    "completion_reason",
    "lease_owner",
    "lease_expires_at",
)


@pytest.mark.parametrize(
    "name,state",
    [
        ("retry_now", State.DEAD),
        ("retry_now", State.FAILED),
        ("cancel", State.RUNNING),
        ("confirm", State.RESULT_STORED),
    ],
)
def test_a_bulk_transition_leaves_a_job_as_the_model_method_does(make_job, db_clock, name, state):
    one, many = (job_in_state(make_job(), state, attempts=5) for _ in range(2))
    Job.objects.filter(pk__in=[one.pk, many.pk]).update(
        next_attempt_at=db_clock.now(), finished_at=db_clock.now(), completion_reason="before", lease_owner="w:1"
    )
    leases.transition_apply(one.id, name, actor="t", cause="t", reason="same")
    leases.transition_many(name, [many.id], actor="t", cause="t", reason="same")
    by_method, by_bulk = (Job.objects.values(*WRITTEN, "due_at").get(pk=pk) for pk in (one.pk, many.pk))
    for field in WRITTEN:
        written = by_method[field]
        if field == "finished_at" and written is not None:  # both "now", a few statements apart
            assert by_bulk[field] is not None and abs(by_bulk[field] - written).total_seconds() < 60, field
        else:
            assert by_bulk[field] == written, f"{name} from {state}: {field} is {by_bulk[field]!r}, not {written!r}"
    if name == "retry_now":
        assert by_bulk["attempts"] == 0 and by_bulk["due_at"] <= db_clock.now() + timedelta(seconds=60)


def test_the_write_paths_together_perform_exactly_the_declared_pairs(make_job, worker, db_clock):
    """Drive every write path from every state and collect the (from, to) pairs that really happened."""
    performed = set()
    for state in ALL_STATES:
        for path in _all_write_paths(worker).values():
            job = job_in_state(make_job(), state, lease_version=1 if state in ("reserved", "running") else 0)
            Job.objects.filter(pk=job.pk).update(lease_expires_at=db_clock.now(), next_attempt_at=db_clock.now())
            db_clock.advance(1)
            try:
                path(job)
            except (leases.StaleAttempt, TransitionNotAllowed):
                pass
            performed |= set(Transition.objects.exclude(from_state="").values_list("from_state", "to_state"))
            Job.objects.filter(pk=job.pk).update(state=State.DONE)  # out of the way of the next sweep
    assert performed == DECLARED_PAIRS
    assert ("done", "running") not in performed and ("dead", "result_stored") not in performed


def test_human_transitions_check_the_permission_of_the_person(make_job):
    job = job_in_state(make_job(), State.DEAD)
    someone = get_user_model().objects.create_user("someone", password="x" * 12)
    with pytest.raises(PermissionDenied):
        services.job_retry_now(job_id=job.id, actor="user:someone", reason="try again", user=someone)
    job.refresh_from_db()
    assert job.state == State.DEAD
    someone.user_permissions.add(Permission.objects.get(codename="operate_job"))
    someone = get_user_model().objects.get(pk=someone.pk)  # fresh permission cache
    assert (
        services.job_retry_now(job_id=job.id, actor="user:someone", reason="try again", user=someone).state == "planned"
    )
