"""The worker runtime in this process, on real PostgreSQL: outcomes, errors, timeouts, heartbeats,
lost leases, pausing and draining. (Real pool processes are exercised in tests/processes.)"""

import time
import uuid

import pytest

from jobs import insert
from jobs import services as job_services
from jobs.errors import PermanentError, TransientError
from jobs.models import Attempt, Job, State, StepEvent
from jobs.retry import RetryPolicy
from workers.runtime import lifecycle
from workers.runtime.context import Child, Done, NeedsReview, Skipped, Stored
from workers.runtime.models import WorkerProcess
from workers.runtime.services import job_submit, pool_pause, pool_resume

pytestmark = pytest.mark.django_db(transaction=True)


def submit(job_type, payload=None, **fields):
    return job_submit(
        job_type=job_type.name, payload=payload or {}, idempotency_key=uuid.uuid4().hex, actor="test", **fields
    ).job


def reload(job):
    return Job.objects.get(pk=job.pk)


def test_a_stored_outcome_with_steps_becomes_result_stored(job_type_factory, pool_runtime):
    def handler(ctx):
        with ctx.step("fetch", url="u") as info:
            info["status"] = 200
        with ctx.step("store"):
            pass
        return Stored(result_ref=f"r/{ctx.job_id}", result_checksum="c1")

    job_type = job_type_factory(handler)
    job = submit(job_type)
    report = pool_runtime().wake()
    assert (report.claimed, report.completed) == (1, 1)
    job = reload(job)
    assert (job.state, job.result_ref, job.result_checksum, job.processing_version) == (
        State.RESULT_STORED,
        f"r/{job.id}",
        "c1",
        "test@1",
    )
    assert list(StepEvent.objects.filter(job=job).order_by("id").values_list("step", "outcome", "data")) == [
        ("fetch", "ok", {"url": "u", "status": 200}),
        ("store", "ok", {}),
    ]


@pytest.mark.parametrize(
    "outcome,state,error_class,reason",
    [
        (
            lambda ctx: Skipped("robots.txt disallows /private"),
            State.DONE,
            "",
            "skipped: robots.txt disallows /private",
        ),
        (lambda ctx: Done("no match (best 0.41)", result_ref="finding:1"), State.DONE, "", "no match (best 0.41)"),
        (lambda ctx: NeedsReview("score 0.71 between thresholds"), State.UNCLEAR, "NeedsReview", ""),
        (lambda ctx: "not an outcome", State.DEAD, "InvalidOutcome", "permanent error: InvalidOutcome"),
    ],
)
def test_every_outcome_maps_to_its_transition(job_type_factory, pool_runtime, outcome, state, error_class, reason):
    job = submit(job_type_factory(outcome))
    pool_runtime().wake()
    job = reload(job)
    assert (job.state, job.error_class, job.completion_reason) == (state, error_class, reason)
    assert (job.finished_at is not None) == (state in (State.DONE, State.DEAD))


def test_errors_are_routed_by_their_class(job_type_factory, pool_runtime):
    class Busy(TransientError):
        retry_after = 3

    def transient(ctx):
        raise Busy("503 from the source")

    def permanent(ctx):
        raise PermanentError("404")

    def surprise(ctx):
        raise ZeroDivisionError("bug")

    jobs = [submit(job_type_factory(h)) for h in (transient, permanent, surprise)]
    runtime = pool_runtime()
    assert runtime.wake().failed == 3
    busy, missing, buggy = (reload(j) for j in jobs)
    assert busy.state == State.FAILED and busy.error_class.endswith("Busy")
    waited = (busy.next_attempt_at - busy.state_changed_at).total_seconds()
    assert 2.9 < waited < 3.1, "the reported Retry-After is honoured"
    assert (missing.state, missing.completion_reason) == (State.DEAD, "permanent error: jobs.errors.PermanentError")
    assert (buggy.state, buggy.error_class) == (State.FAILED, "ZeroDivisionError")


def test_a_job_past_its_timeout_is_interrupted_even_in_a_blocking_call(job_type_factory, pool_runtime):
    job = submit(job_type_factory(lambda ctx: time.sleep(30), timeout_seconds=0.3))
    started = time.monotonic()
    pool_runtime().wake()
    assert time.monotonic() - started < 5
    job = reload(job)
    assert (job.state, job.error_class) == (State.FAILED, "workers.runtime.pool.JobTimeout")
    assert "timeout of 0.3 s" in job.error_message


def test_a_job_of_a_type_the_pool_does_not_know_goes_dead(pool_runtime):
    stray = insert.job_insert(type="retired_type", pool="analysis", payload={}, idempotency_key="x", actor="test").job
    pool_runtime().wake()
    stray = reload(stray)
    assert (stray.state, stray.error_class) == (State.DEAD, "workers.runtime.registry.UnknownJobType")


def test_heartbeats_keep_a_long_job_leased(job_type_factory, pool_runtime):
    def slow(ctx):
        time.sleep(1.5)
        return Stored()

    job = submit(job_type_factory(slow, lease_seconds=0.6, heartbeat_seconds=0.2, timeout_seconds=1.0 * 2 + 0.5))
    pool_runtime().wake()
    job = reload(job)
    attempt = Attempt.objects.get(job=job)
    assert job.state == State.RESULT_STORED
    assert (attempt.heartbeat_at - attempt.claimed_at).total_seconds() > 1.0


def test_a_lost_lease_tells_the_handler_to_stop_and_nothing_more_is_written(job_type_factory, pool_runtime):
    seen = {}

    def cancelled_meanwhile(ctx):
        job_services.job_cancel(job_id=ctx.job_id, actor="operator", reason="withdrawn by the customer")
        deadline = time.monotonic() + 5
        while not ctx.should_stop() and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.update(stopped=ctx.should_stop(), reason=ctx.stop_reason)
        ctx.check_stop()
        return Stored(result_ref="must not be written")

    job = submit(job_type_factory(cancelled_meanwhile, heartbeat_seconds=0.1))
    report = pool_runtime().wake()
    job = reload(job)
    # The refused heartbeat stopped the handler: a worker that lost its lease does not keep working.
    assert seen["stopped"] and seen["reason"].startswith("lease lost"), seen
    assert report.refused == 1 and report.completed == 0
    assert (job.state, job.result_ref) == (State.CANCELLED, "")
    assert Attempt.objects.get(job=job).refused_writes >= 1


def test_batches_grow_for_short_jobs(job_type_factory, pool_runtime):
    job_type = job_type_factory(lambda ctx: Stored())
    for _ in range(60):
        submit(job_type)
    runtime = pool_runtime()
    report = runtime.wake()
    assert report.completed == 60
    assert report.batches < 20 and runtime.batch_size() > 10


def test_a_paused_pool_claims_nothing_until_resumed(job_type_factory, pool_runtime):
    job = submit(job_type_factory(lambda ctx: Stored()))
    pool_pause(pool="analysis", actor="operator", reason="source outage")
    runtime = pool_runtime()
    assert runtime.wake().claimed == 0
    pool_resume(pool="analysis", actor="operator")
    assert runtime.wake().completed == 1
    assert reload(job).state == State.RESULT_STORED


def test_a_draining_pool_hands_back_what_it_holds(job_type_factory, pool_runtime, monkeypatch, tmp_path, settings):
    settings.LEITSTAND_RUN_DIR = tmp_path
    monkeypatch.setenv(lifecycle.MAIN_PID_VARIABLE, "999999")

    def begins_shutdown(ctx):
        lifecycle.drain_begin(999999)
        while not ctx.should_stop():
            time.sleep(0.05)
        ctx.check_stop()

    first = submit(job_type_factory(begins_shutdown, heartbeat_seconds=0.1), priority=0)
    second = submit(job_type_factory(lambda ctx: Stored()), priority=9)
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001  # claim both in one batch
    report = runtime.wake()
    assert report.released == 2
    assert {reload(first).state, reload(second).state} == {State.PLANNED}
    assert Attempt.objects.filter(outcome=Attempt.Outcome.RELEASED).count() == 2


def test_the_worker_registers_itself(job_type_factory, pool_runtime):
    submit(job_type_factory(lambda ctx: Stored()))
    runtime = pool_runtime()
    runtime.wake()
    deadline = time.monotonic() + 5
    while not WorkerProcess.objects.filter(pid=runtime.worker.pid).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    row = WorkerProcess.objects.get(pid=runtime.worker.pid)
    assert (row.pool, row.wakeups) == ("analysis", 1) and row.rss_bytes > 10_000_000


def test_spawned_children_carry_parent_and_correlation(job_type_factory, pool_runtime):
    child_type = job_type_factory(lambda ctx: Stored())

    def parent_handler(ctx):
        ctx.spawn(child_type.name, {"n": 1}, key=f"{ctx.job_id}:child-1")
        ctx.spawn(child_type.name, {"n": 1}, key=f"{ctx.job_id}:child-1")  # idempotent
        return Stored()

    parent = submit(job_type_factory(parent_handler), correlation_id="case-9")
    pool_runtime().wake()
    (child,) = Job.objects.filter(parent=parent)
    assert child.correlation_id == "case-9" and child.state == State.RESULT_STORED


def test_children_spawned_together_inherit_like_one_and_report_conflicts(job_type_factory, pool_runtime):
    child_type = job_type_factory(lambda ctx: Stored())
    answers = []

    def parent_handler(ctx):
        first = Child(child_type.name, {"n": 1}, "one", priority=2, source="site")
        answers.append(ctx.spawn_many([first, Child(child_type.name, {"n": 2}, "two")]))
        # Again: the same request is answered with its job; the same key for another request is a
        # conflict, reported while the new child beside it is still created.
        answers.append(
            ctx.spawn_many([first, Child(child_type.name, {"n": 99}, "two"), Child(child_type.name, {}, "three")])
        )
        return Stored()

    parent = submit(job_type_factory(parent_handler), correlation_id="case-7")
    pool_runtime().wake()
    children = {job.idempotency_key: job for job in Job.objects.filter(parent=parent)}
    assert set(children) == {"one", "two", "three"}
    assert {(c.correlation_id, c.client_id, c.key_namespace) for c in children.values()} == {("case-7", None, "")}
    assert (children["one"].priority, children["one"].source, children["two"].payload) == (2, "site", {"n": 2})
    first, second = answers
    assert [(s.job_id, s.created, s.conflict) for s in first] == [
        (children["one"].pk, True, False),
        (children["two"].pk, True, False),
    ]
    assert [(s.job_id, s.created, s.conflict) for s in second] == [
        (children["one"].pk, False, False),
        (children["two"].pk, False, True),
        (children["three"].pk, True, False),
    ]


def test_retry_policy_of_the_type_sets_the_budget(job_type_factory):
    job = submit(
        job_type_factory(lambda ctx: Stored(), retry=RetryPolicy(base_seconds=1, cap_seconds=2, max_attempts=2))
    )
    assert job.max_attempts == 2


def test_jobs_waiting_their_turn_in_a_batch_keep_their_leases(job_type_factory, pool_runtime):
    def slow(ctx):
        time.sleep(1.2)
        return Stored()

    timing = {"lease_seconds": 0.6, "heartbeat_seconds": 0.2, "timeout_seconds": 1.5}
    first = submit(job_type_factory(slow, **timing), priority=0)
    second = submit(job_type_factory(lambda ctx: Stored(), **timing), priority=1)
    runtime = pool_runtime()
    runtime.seconds_per_job = 0.001  # one claim takes both
    assert runtime.wake().completed == 2
    waited = Attempt.objects.get(job=second)
    assert (waited.heartbeat_at - waited.claimed_at).total_seconds() > 0.6, "its lease was kept alive meanwhile"
    assert reload(first).state == reload(second).state == State.RESULT_STORED


def test_text_from_hostile_pages_never_breaks_a_write(job_type_factory, pool_runtime):
    """PostgreSQL refuses NUL in text and jsonb; it is replaced wherever handler text is stored."""

    def stored(ctx):
        with ctx.step("fetch", url="http://x/\x00a") as info:
            info["title"] = "a\x00b"
        return Done("title a\x00b", result_ref="page:\x00")

    def failed(ctx):
        with ctx.step("fetch\x00"):
            pass
        raise PermanentError("bad byte \x00 in page")

    done, dead = submit(job_type_factory(stored)), submit(job_type_factory(failed))
    pool_runtime().wake()
    done, dead = reload(done), reload(dead)
    assert (done.state, done.completion_reason, done.result_ref) == (State.DONE, "title a\ufffdb", "page:\ufffd")
    assert StepEvent.objects.get(job=done).data == {"url": "http://x/\ufffda", "title": "a\ufffdb"}
    assert (dead.state, dead.error_message) == (State.DEAD, "bad byte \ufffd in page")
    assert StepEvent.objects.get(job=dead).step == "fetch\ufffd"


def test_a_childs_subject_the_handler_gives_spares_the_declarations_read(job_type_factory, pool_runtime):
    """A handler that knows what its child is about (the crawl: an analysis child's image URL) hands
    it over; the child type's declared subject (the analysis reads its candidate's URL) is asked only
    for children without one. An API client's submission never chooses its own subject."""
    asked = []

    def declared_subject(payload):
        asked.append(payload["n"])
        return f"declared {payload['n']}"

    child_type = job_type_factory(lambda ctx: Stored(), subject=declared_subject)

    def parent_handler(ctx):
        ctx.spawn_many(
            [Child(child_type.name, {"n": 1}, "one", subject="given 1"), Child(child_type.name, {"n": 2}, "two")]
        )
        return Stored()

    parent = submit(job_type_factory(parent_handler))
    pool_runtime().wake()
    subjects = dict(Job.objects.filter(parent=parent).values_list("idempotency_key", "subject"))
    assert subjects == {"one": "given 1", "two": "declared 2"}
    assert asked == [2]
    from workers.runtime.services import jobs_submit_many

    jobs_submit_many(
        [{"job_type": child_type.name, "payload": {"n": 3}, "idempotency_key": "three", "subject": "chosen"}],
        actor="test",
        correlation_id="c",
    )
    assert Job.objects.get(idempotency_key="three").subject == "declared 3"
