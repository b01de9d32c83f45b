"""The path check on real attempts: a synthetic job run by a pool runtime is judged against its
type's declared paths by the control process's sweep; timing anomalies on constructed
distributions."""

import pytest

from jobs import paths
from jobs.models import Attempt
from jobs.paths import Percentile, TimingBaseline, attempts_check
from jobs.pathspec import PathSpec
from workers.runtime.registry import registry

pytestmark = pytest.mark.django_db(transaction=True)


def specs():
    return {t.name: t.paths for t in registry.all()}


def run(make_job, pool_runtime, **payload):
    job = make_job("synthetic", pool="crawl", payload={"pool": "crawl", **payload})
    pool_runtime("crawl").wake()
    attempts_check(specs())
    return Attempt.objects.get(job=job)


def test_a_declared_path_conforms(make_job, pool_runtime):
    attempt = run(make_job, pool_runtime, steps=["fetch", "parse", "store"])
    assert (attempt.path_checked, attempt.path_conforms, attempt.path_signature) == (
        True,
        True,
        "fetch > parse > store -> done",
    )
    assert attempt.duration_ms is not None and attempt.duration_ms >= 0 and not attempt.slow


def test_a_skipped_step_is_divergent_and_named(make_job, pool_runtime):
    attempt = run(make_job, pool_runtime, steps=["fetch", "store"])
    assert attempt.path_conforms is False and attempt.path_divergence_kind == "missing_step"
    assert attempt.path_divergence == "missing step parse (declared: fetch > parse > store)"


def test_a_failure_on_a_declared_path_conforms_and_a_wrong_order_does_not(make_job, pool_runtime):
    failed = run(make_job, pool_runtime, steps=["fetch", "parse"], fail="permanent")
    assert failed.outcome == "dead" and failed.path_conforms is True
    assert failed.path_signature == "fetch > parse -> failed"
    swapped = run(make_job, pool_runtime, steps=["parse", "fetch", "store"])
    assert swapped.path_divergence_kind == "wrong_order"


def test_each_attempt_is_checked_once(make_job, pool_runtime):
    run(make_job, pool_runtime)
    assert attempts_check(specs()) == []


def test_timing_flags_on_constructed_distributions(settings):
    settings.LEITSTAND_PATHS = {"slow_factor": 3.0, "min_samples": 100}
    baseline = TimingBaseline()
    baseline.types = {"crawl": Percentile(p99_ms=800.0, samples=5000), "analysis": Percentile(p99_ms=50.0, samples=20)}
    baseline.steps = {("crawl", "fetch"): Percentile(p99_ms=500.0, samples=4000)}
    assert baseline.slow("crawl", 2000.0, [("fetch", "ok", 400.0)]) == ""
    assert baseline.slow("crawl", 2500.0, []).startswith("ran 2.50 s; crawl's p99 is 0.80 s (× 3 = 2.40 s")
    assert baseline.slow("crawl", 1200.0, [("fetch", "ok", 1600.0)]).startswith("step fetch took 1.60 s")
    assert baseline.slow("analysis", 10_000.0, []) == "", "too few runs to know what is usual"


def test_a_slow_attempt_is_flagged_by_the_sweep(make_job, pool_runtime, settings, monkeypatch):
    settings.LEITSTAND_PATHS = {"slow_factor": 3.0, "min_samples": 10}
    baseline = TimingBaseline(refresh_seconds=3600)
    baseline.refresh_if_due()
    baseline.types = {"synthetic": Percentile(p99_ms=20.0, samples=1000)}
    monkeypatch.setattr(paths, "_baseline", baseline)
    attempt = run(make_job, pool_runtime, duration_ms=150)
    assert attempt.slow and "synthetic's p99 is 0.02 s" in attempt.slow_reason


@pytest.fixture
def skipping_type():
    """A type whose handler looks at robots.txt and skips the work: its attempts end ``skipped``."""
    from jobs.retry import RetryPolicy
    from workers.runtime.context import Skipped
    from workers.runtime.registry import JobType

    def handler(ctx):
        with ctx.step("robots"):
            pass
        return Skipped("robots.txt forbids the page")

    declared = registry.register(
        JobType(
            name="test_skipping",
            handler=handler,
            pool="crawl",
            timeout_seconds=5,
            lease_seconds=30,
            heartbeat_seconds=1,
            retry=RetryPolicy(base_seconds=1, cap_seconds=5),
            processing_version="test@1",
            expected_paths=("robots -> skipped",),
        )
    )
    yield declared
    registry.unregister(declared.name)


def test_a_skipped_attempt_ends_in_its_own_exit_not_done(make_job, pool_runtime, skipping_type):
    job = make_job(skipping_type.name, pool="crawl", payload={})
    pool_runtime("crawl").wake()
    attempts_check(specs())
    attempt = Attempt.objects.get(job=job)
    assert attempt.outcome == Attempt.Outcome.SKIPPED
    assert (attempt.path_signature, attempt.path_conforms) == ("robots -> skipped", True)
    job.refresh_from_db()
    assert (job.state, job.completion_reason) == ("done", "skipped: robots.txt forbids the page")
    # A type that declares only "-> done" is told the attempt diverged: skipped is not done.
    Attempt.objects.filter(pk=attempt.pk).update(path_checked=False)
    attempts_check({skipping_type.name: PathSpec.parse("robots -> done")})
    attempt.refresh_from_db()
    assert attempt.path_conforms is False


def test_the_migration_gives_attempts_skipped_before_it_their_outcome(make_job, worker):
    from jobs import leases
    from jobs.models import Transition
    from tests.support.db import migrate_to

    skipped, done = make_job(), make_job()
    for _ in (skipped, done):
        (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=30, start=True)
        leases.complete_many(
            [
                leases.Completion(
                    claimed.id,
                    claimed.lease_version,
                    settled="skipped: robots.txt" if claimed.id == skipped.id else "done",
                )
            ],
            actor="old-runtime",
        )
    # The schema before the outcome's meaning moved (the engine of today ran the jobs: it needs
    # today's columns); the jobs and their attempts stay, written as the runtime wrote them then.
    migrate_to([("jobs", "0017_worker_deaths")])
    Attempt.objects.filter(job__in=[skipped, done]).update(outcome="completed")
    assert Transition.objects.filter(job=skipped, cause__startswith="skipped:").exists()
    migrate_to()
    assert Attempt.objects.get(job=skipped).outcome == "skipped"
    assert Attempt.objects.get(job=done).outcome == "completed"
