"""One bad item never stops the others (issue 35), in the runtime: a fan-out's refused child, a dry
run that refuses what the real run refuses, a handler that ends its own process, a handler's
unreadable retry_after."""

import uuid

import pytest

from jobs.models import Job, State
from workers.runtime.context import Child, Stored
from workers.runtime.replay import Recorder
from workers.runtime.services import job_submit, jobs_spawn_many, spawn_refusals

pytestmark = pytest.mark.django_db(transaction=True)

TOO_LONG_KEY = "run-1:" + "x" * 300


def submit(job_type, payload=None):
    return job_submit(job_type=job_type.name, payload=payload or {}, idempotency_key=uuid.uuid4().hex, actor="t").job


def test_a_refused_child_is_reported_on_its_own_and_its_siblings_are_created(job_type_factory, pool_runtime):
    child_type = job_type_factory(lambda ctx: Stored())
    answers = []

    def parent(ctx):
        answers.extend(
            ctx.spawn_many(
                [
                    Child(child_type.name, {"n": 1}, "good-1"),
                    Child(child_type.name, {"n": 2}, TOO_LONG_KEY),
                    Child(child_type.name, {"n": "\x00"}, "nul"),
                    Child(child_type.name, {"n": 3}, "good-2"),
                ]
            )
        )
        return Stored()

    job = submit(job_type_factory(parent))
    pool_runtime().wake()
    assert Job.objects.get(pk=job.pk).state == State.RESULT_STORED
    assert sorted(Job.objects.filter(parent=job).values_list("idempotency_key", flat=True)) == ["good-1", "good-2"]
    assert [bool(a.refused) for a in answers] == [False, True, True, False]
    assert answers[1].refused.startswith("idempotency_key: must be a non-empty string of at most 255")
    assert answers[2].refused.startswith("payload: must not contain NUL")
    assert answers[1].job_id is None and answers[0].created


def test_a_dry_run_refuses_exactly_what_the_real_spawn_refuses(job_type_factory):
    child_type = job_type_factory(lambda ctx: Stored())
    parent = submit(job_type_factory(lambda ctx: Stored()))
    children = [
        {"job_type": child_type.name, "payload": {"n": 1}, "idempotency_key": "ok"},
        {"job_type": child_type.name, "payload": {"n": 2}, "idempotency_key": TOO_LONG_KEY},
        {"job_type": "no-such-type", "payload": {}, "idempotency_key": "k"},
    ]
    recorded = Recorder(reuse_ledger=True).spawn_many(children, parent_id=parent.pk, correlation_id="c")
    Job.objects.filter(pk=parent.pk).update(state=State.RUNNING, lease_version=1)
    real = jobs_spawn_many(children, parent_id=parent.pk, parent_lease_version=1, correlation_id="c")
    assert [r.refused for r in recorded] == [r.refused for r in real] == spawn_refusals(children, correlation_id="c")
    assert [bool(r.refused) for r in real] == [False, True, True]


def test_a_handler_that_calls_sys_exit_fails_its_own_job_and_its_batch_mates_are_done(
    job_type_factory, pool_runtime, settings
):
    settings.LEITSTAND_MAX_BATCH = 10
    runs = {"mate": 0}

    def handler(ctx):
        if ctx.payload.get("exit"):
            raise SystemExit(3)  # as a library's sys.exit() does
        runs["mate"] += 1
        return Stored()

    job_type = job_type_factory(handler)
    before = [submit(job_type, {"n": 1}), submit(job_type, {"n": 2})]
    exiting = submit(job_type, {"exit": True})
    after = submit(job_type, {"n": 3})
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001  # claim them in one batch
    runtime.wake()
    exiting = Job.objects.get(pk=exiting.pk)
    assert (exiting.state, exiting.error_class, exiting.attempts) == (State.FAILED, "SystemExit", 1)
    assert {Job.objects.get(pk=j.pk).state for j in [*before, after]} == {State.RESULT_STORED}
    assert runs["mate"] == 3


def test_a_retried_job_runs_after_its_batch_mates_results_are_written(job_type_factory, pool_runtime):
    """A job that ran before (a worker died under it) may kill the next worker too: the results of the
    jobs ahead of it in its batch are committed before it runs, so they cannot run again."""
    seen = {}

    def handler(ctx):
        if ctx.payload.get("suspect"):
            seen["mates_done"] = Job.objects.filter(state=State.RESULT_STORED).count()
        return Stored()

    job_type = job_type_factory(handler)
    mates = [submit(job_type, {"n": i}) for i in range(3)]
    suspect = submit(job_type, {"suspect": True})
    Job.objects.filter(pk=suspect.pk).update(attempts=1)  # it ran before
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001
    runtime.wake()
    assert seen["mates_done"] == 3
    assert {Job.objects.get(pk=j.pk).state for j in [*mates, suspect]} == {State.RESULT_STORED}


@pytest.mark.parametrize("retry_after", ["soon", float("nan"), float("inf"), True, object()])
def test_an_unreadable_retry_after_is_ignored_not_a_stranded_batch(job_type_factory, pool_runtime, retry_after):
    from jobs.errors import TransientError

    class Busy(TransientError):
        pass

    def handler(ctx):
        if ctx.payload.get("bad"):
            error = Busy("come back later")
            error.retry_after = retry_after
            raise error
        return Stored()

    job_type = job_type_factory(handler)
    bad, good = submit(job_type, {"bad": True}), submit(job_type, {"n": 1})
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001
    runtime.wake()
    bad, good = Job.objects.get(pk=bad.pk), Job.objects.get(pk=good.pk)
    assert (bad.state, good.state) == (State.FAILED, State.RESULT_STORED)
    assert bad.error_message == "come back later"


def test_text_no_record_can_hold_is_replaced_not_the_batchs_failure(job_type_factory, pool_runtime):
    """A lone surrogate (a page declared as UTF-7 makes one) in step data or an error message: jsonb
    and text refuse it, and the batch's one completion statement would have failed every job in it."""

    def handler(ctx):
        with ctx.step("work") as info:
            info["url"] = "http://h/\ud800\x00.png"
        if ctx.payload.get("fail"):
            raise ValueError("bad \udfff url")
        return Stored()

    job_type = job_type_factory(handler)
    jobs = [submit(job_type, {"n": 1}), submit(job_type, {"fail": True}), submit(job_type, {"n": 2})]
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001
    runtime.wake()
    states = [Job.objects.get(pk=j.pk) for j in jobs]
    assert [j.state for j in states] == [State.RESULT_STORED, State.DEAD, State.RESULT_STORED]
    assert states[1].error_message == "bad \ufffd url"
    from jobs.models import StepEvent

    assert StepEvent.objects.filter(job=jobs[0]).get().data["url"] == "http://h/\ufffd\ufffd.png"


def test_an_older_non_ascii_correlation_id_still_spawns_children(job_type_factory, pool_runtime):
    """IDs stored before they had to be ASCII: children get the ID percent-encoded, never a refusal."""
    child_type = job_type_factory(lambda ctx: Stored())

    def parent(ctx):
        ctx.spawn_many([Child(child_type.name, {"n": 1}, "c1")])
        return Stored()

    job = submit(job_type_factory(parent))
    Job.objects.filter(pk=job.pk).update(correlation_id="bestellung-müller-4711")
    pool_runtime().wake()
    (child,) = Job.objects.filter(parent=job)
    assert Job.objects.get(pk=job.pk).state == State.RESULT_STORED
    assert child.correlation_id == "bestellung-m%C3%BCller-4711"


def test_a_fan_out_whose_every_child_is_refused_still_ends_its_parent(job_type_factory, pool_runtime):
    child_type = job_type_factory(lambda ctx: Stored())
    answers = []

    def parent(ctx):
        answers.extend(ctx.spawn_many([Child(child_type.name, {"n": 1}, TOO_LONG_KEY)]))
        return Stored()

    job = submit(job_type_factory(parent))
    pool_runtime().wake()
    assert Job.objects.get(pk=job.pk).state == State.RESULT_STORED
    assert [bool(a.refused) for a in answers] == [True] and not Job.objects.filter(parent=job).exists()


def test_a_job_deferred_past_its_useful_life_ends_with_the_reason(job_type_factory, pool_runtime, settings):
    """A deferral uses no retry budget: a job older than LEITSTAND_DEFERRED_LIFE_HOURS that is deferred
    again ends dead with why, instead of waiting for good; a young one is deferred as before."""
    from datetime import timedelta

    from jobs.errors import Deferred

    def handler(ctx):
        raise Deferred("host h: a request to this host is in flight; turn booked in 30.0 s", retry_after=30)

    job_type = job_type_factory(handler)
    old, young = submit(job_type, {"n": 1}), submit(job_type, {"n": 2})
    Job.objects.filter(pk=old.pk).update(created_at=old.created_at - timedelta(hours=169))
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001
    runtime.wake()
    old, young = Job.objects.get(pk=old.pk), Job.objects.get(pk=young.pk)
    assert (old.state, old.error_class) == (State.DEAD, "DeferredPastUsefulLife")
    assert old.error_message.startswith("deferred past its useful life (168 h, LEITSTAND_DEFERRED_LIFE_HOURS): host h")
    assert (young.state, young.attempts) == (State.PLANNED, 0)
