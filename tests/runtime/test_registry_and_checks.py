"""The job-type registry fails loudly; the system checks name every violated timing invariant."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.checks import timing_invariants
from jobs.retry import RetryPolicy
from workers.runtime.registry import JobType, Registry, UnknownJobType, registry


def declaration(**overrides):
    fields = {
        "name": "crawl_page",
        "handler": lambda ctx: None,
        "pool": "crawl",
        "timeout_seconds": 20,
        "lease_seconds": 30,
        "heartbeat_seconds": 10,
        "retry": RetryPolicy(),
        "processing_version": "crawl@1",
        "expected_paths": ("fetch store",),
    }
    fields.update(overrides)
    return fields


def test_a_duplicate_declaration_stops_start_up():
    types = Registry()
    types.register(JobType(**declaration()))
    with pytest.raises(ImproperlyConfigured, match="registered twice"):
        types.register(JobType(**declaration()))


@pytest.mark.parametrize(
    "overrides,complaint",
    [
        ({"handler": None}, "handler must be callable"),
        ({"pool": ""}, "pool is required"),
        ({"lease_seconds": 0}, "lease_seconds must be positive"),
        ({"retry": None}, "retry must be a jobs.retry.RetryPolicy"),
        ({"processing_version": ""}, "processing_version is required"),
        ({"expected_paths": ()}, "expected_paths"),
        ({"expected_paths": ("fetch (store",)}, "expected_paths"),
        ({"default_priority": 10}, "default_priority"),
        ({"name": "9lives"}, "name must start with a letter"),
    ],
)
def test_an_incomplete_declaration_stops_start_up(overrides, complaint):
    with pytest.raises(ImproperlyConfigured, match=complaint):
        JobType(**declaration(**overrides))


def test_unknown_types_are_named_with_the_known_ones():
    with pytest.raises(UnknownJobType, match="unknown job type 'nope'; registered types: .*synthetic"):
        registry.get("nope")


def test_the_shipped_configuration_passes_the_checks():
    assert timing_invariants() == []


@pytest.mark.parametrize(
    "overrides,check_id",
    [
        ({"heartbeat_seconds": 11}, "leitstand.E001"),
        ({"timeout_seconds": 45}, "leitstand.E002"),
        (
            {"timeout_seconds": 20, "lease_seconds": 2000, "heartbeat_seconds": 1, "external_call_timeout_seconds": 20},
            "leitstand.E004",
        ),
        ({"pool": "nowhere"}, "leitstand.E005"),
    ],
)
def test_each_timing_invariant_is_checked(overrides, check_id, settings):
    settings.LEITSTAND_LEASE_GRACE_SECONDS = 10
    bad = registry.register(JobType(**declaration(name="bad_type", **overrides)))
    try:
        assert check_id in {error.id for error in timing_invariants()}
    finally:
        registry.unregister(bad.name)


def test_a_job_timeout_that_outlasts_the_wakeup_timeout_is_reported(settings):
    settings.LEITSTAND_WAKEUP_TIMEOUT_SECONDS = 20
    assert "leitstand.E003" in {error.id for error in timing_invariants()}


def test_a_django_q_retry_below_timeout_plus_queue_wait_is_reported(settings):
    clusters = {
        name: {**cluster, "retry": cluster["timeout"]} for name, cluster in settings.Q_CLUSTER["ALT_CLUSTERS"].items()
    }
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "ALT_CLUSTERS": clusters}
    assert "leitstand.E006" in {error.id for error in timing_invariants()}


@pytest.mark.django_db
def test_consumers_are_counted_from_the_age_of_their_last_refresh(db_clock):
    from workers.runtime.models import WorkerProcess
    from workers.runtime.selectors import pool_consumers

    WorkerProcess.objects.create(host="a", pid=1, pool="crawl")
    stale = WorkerProcess.objects.create(host="a", pid=2, pool="crawl")
    WorkerProcess.objects.create(host="b", pid=3, pool="analysis")
    db_clock.advance(60)
    WorkerProcess.objects.filter(pk=stale.pk).update(last_seen_at=db_clock.now() - timedelta(seconds=100))
    WorkerProcess.objects.exclude(pk=stale.pk).update(last_seen_at=db_clock.now())
    assert pool_consumers() == {"crawl": 1, "analysis": 1, "recheck": 0, "notify": 0, "synthetic": 0, "tasks": 0}


@pytest.mark.django_db
def test_pools_are_annotated_with_their_live_consumers_in_one_query(db_clock, django_assert_num_queries):
    from workers.runtime.models import Pool, WorkerProcess
    from workers.runtime.selectors import pools_with_consumers

    for name in ("crawl", "analysis", "recheck"):
        Pool.objects.get_or_create(name=name)
    WorkerProcess.objects.create(host="a", pid=1, pool="crawl")
    WorkerProcess.objects.create(host="a", pid=2, pool="crawl")
    with django_assert_num_queries(1):
        counted = {p.name: p.live_consumers for p in pools_with_consumers()}
    assert counted == {"crawl": 2, "analysis": 0, "recheck": 0, "notify": 0, "synthetic": 0, "tasks": 0}
