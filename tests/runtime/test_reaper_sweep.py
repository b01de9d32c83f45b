"""The reaper (workers/runtime/reaper_sweep.py): its config, an empty round, and a round that releases
the leases expired longer than the grace — the lost attempt counted, the job waiting for its next —
and no other."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs import leases
from jobs.models import Job, State
from workers.runtime import options, reaper_sweep
from workers.runtime import options as runtime_settings
from workers.runtime.reaper_sweep import ReaperConfig
from workers.runtime.registry import registry

LEASE = 30


def test_the_grace_comes_from_the_settings_and_a_bad_one_names_its_setting(settings):
    settings.LEITSTAND_LEASE_GRACE_SECONDS = 3
    assert ReaperConfig.from_options(options.current()) == replace(
        ReaperConfig.from_options(runtime_settings.current()), grace_seconds=3
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_LEASE_GRACE_SECONDS must be a number of at least 0"):
        settings.LEITSTAND_LEASE_GRACE_SECONDS = -1  # refused with the runtime's options


def test_an_empty_round_releases_nothing(db):
    assert reaper_sweep.run_once(ReaperConfig.from_options(runtime_settings.current())) == 0


def test_only_leases_past_their_grace_are_released(make_job, worker, db_clock):
    expired, fresh = make_job("synthetic", pool="crawl"), make_job("synthetic", pool="crawl")
    (old,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True, limit=1)
    db_clock.advance(LEASE + 5)
    (new,) = leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True, limit=1)
    assert {old.id, new.id} == {expired.pk, fresh.pk}
    assert (
        reaper_sweep.run_once(replace(ReaperConfig.from_options(runtime_settings.current()), grace_seconds=10)) == 0
    ), "5 s past its lease: within the grace"
    db_clock.advance(6)
    assert reaper_sweep.run_once(replace(ReaperConfig.from_options(runtime_settings.current()), grace_seconds=10)) == 1
    released = Job.objects.get(pk=old.id)
    assert released.state == State.FAILED and released.next_attempt_at is not None, "attempts left: it waits"
    assert released.attempts == 1 < registry.get("synthetic").retry.max_attempts
    assert Job.objects.get(pk=new.id).state == State.RUNNING


def test_a_round_walks_the_leased_set_once_and_releases_each_type_with_its_policy(
    make_job, worker, db_clock, monkeypatch
):
    reaps = []
    reap = leases.reap_expired
    monkeypatch.setattr(leases, "reap_expired", lambda **kw: reaps.append(kw.get("job_type")) or reap(**kw))
    assert (
        reaper_sweep.run_once(replace(ReaperConfig.from_options(runtime_settings.current()), grace_seconds=10)) == 0
        and reaps == []
    ), "nothing expired: one read"
    make_job("synthetic", pool="crawl")
    make_job("retired-type", pool="crawl")  # a type no longer registered: the fallback policy
    leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True, limit=2)
    db_clock.advance(LEASE + 11)
    assert reaper_sweep.run_once(replace(ReaperConfig.from_options(runtime_settings.current()), grace_seconds=10)) == 2
    assert reaps == ["synthetic", None], "its own type's policy, then the fallback for what is left"
    assert set(Job.objects.values_list("state", flat=True)) == {State.FAILED}


def test_a_long_walk_waits_ten_times_as_long_before_the_next(make_job, worker, db_clock, monkeypatch):
    make_job("synthetic", pool="crawl")
    leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, start=True, limit=1)
    db_clock.advance(LEASE + 11)
    pace = reaper_sweep._pace
    monkeypatch.setattr(pace, "due", 0.0)
    pace.took(2.0)  # as a walk under a long transaction elsewhere
    assert (
        reaper_sweep.run_once(replace(ReaperConfig.from_options(runtime_settings.current()), grace_seconds=10)) == 0
    ), "within its pace nothing is walked"
    pace.due = 0.0
    assert reaper_sweep.run_once(replace(ReaperConfig.from_options(runtime_settings.current()), grace_seconds=10)) == 1


def test_it_is_registered_as_the_engine_stage():
    from workers.runtime.sweeps import Stage, sweeps

    sweep = sweeps.get("reaper")
    assert sweep.stage == Stage.ENGINE and sweep.function.func is reaper_sweep.run_once
