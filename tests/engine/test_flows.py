"""Flow keys inside a pool (issue 39): weighted fair shares between keys at equal priority, priority
lanes above them, running limits counted from the leases, pauses, and the lanes' hints kept true."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection

from jobs import flows, insert, leases, services
from jobs.models import FlowKey, FlowLane, Job, State
from jobs.retry import RetryPolicy

POOL = "flowtest"


@pytest.fixture(autouse=True)
def flow_lanes_fresh(monkeypatch):
    leases.flow_settings_changed()  # the tests set keys' limits in the ORM, without the service
    # Each claim reads the lanes (test_a_lone_lane_is_claimed_from_again_for_a_moment shows the pause).
    monkeypatch.setattr(leases, "LONE_LANE_SECONDS", 0)
    yield


def submit(key: str, count: int, *, priority: int = 5, **fields) -> list[Job]:
    return [
        insert.job_insert(
            type=POOL,
            idempotency_key=str(uuid.uuid4()),
            payload={"k": key},
            priority=priority,
            actor="test",
            flow_key_declaration="payload.k",
            **fields,
        ).job
        for _ in range(count)
    ]


def submit_many(key: str, count: int, *, priority: int = 5) -> None:
    insert.jobs_insert_many(
        [
            {
                "type": POOL,
                "pool": POOL,
                "idempotency_key": str(uuid.uuid4()),
                "payload": {"k": key},
                "priority": priority,
                "source": "",
                "max_attempts": 5,
                "schema_version": 1,
                "request_hash": "",
                "flow_key_declaration": "payload.k",
            }
            for _ in range(count)
        ],
        actor="test",
        correlation_id="flows",
    )


def claim(worker, limit: int, **options) -> list[leases.ClaimedJob]:
    return leases.claim(pool=POOL, worker=worker, lease_seconds=60, limit=limit, start=True, **options)


def keys_of(claimed) -> Counter:
    found = dict(Job.objects.filter(pk__in=[c.id for c in claimed]).values_list("pk", "flow_key"))
    return Counter(found[c.id] for c in claimed)


def complete(worker, claimed) -> None:
    for job in claimed:
        leases.complete(job.id, job.lease_version, actor=worker.lease_owner)


@pytest.mark.django_db
def test_a_job_gets_the_flow_key_its_type_declares():
    by_source = insert.job_insert(
        type="flowsource", idempotency_key="a", payload={}, source="shop-a", actor="test", flow_key_declaration="source"
    ).job
    by_client = insert.job_insert(
        type="flowclient",
        idempotency_key="a",
        payload={},
        key_namespace="client:php",
        actor="test",
        flow_key_declaration="client",
    ).job
    url = "https://Images.Example.org:8443/x.jpg"
    by_host = insert.job_insert(
        type="flowhost",
        idempotency_key="a",
        payload={"url": url},
        subject=url,
        actor="test",
        flow_key_declaration="host",
    ).job
    (by_field,) = submit("tenant\r\n7", 1)
    (no_field,) = [
        insert.job_insert(
            type=POOL, idempotency_key="b", payload={"k": {"x": 1}}, actor="test", flow_key_declaration="payload.k"
        ).job
    ]
    assert by_source.flow_key == "shop-a"
    assert by_client.flow_key == "client:php"
    assert by_host.flow_key == "images.example.org:8443"  # as politeness names a host
    assert by_field.flow_key == "tenant%0D%0A7"  # what travels into logs and the console: printable ASCII
    assert no_field.flow_key == ""  # a field that is not a string or a number: no key of its own
    with pytest.raises(ValueError, match="flow_key must be one of"):
        services.flow_key_check("payload.not a field")


@pytest.mark.django_db
def test_a_small_key_is_served_beside_a_flood_at_equal_priority(worker):
    submit_many("big", 500)
    submit_many("small", 10)
    first = claim(worker, 20)
    assert keys_of(first) == {"big": 10, "small": 10}
    # The flood goes on alone once the small key has nothing left.
    assert keys_of(claim(worker, 20)) == {"big": 20}


@pytest.mark.django_db
def test_weights_divide_the_pool_between_keys(worker):
    submit_many("heavy", 400)
    submit_many("light", 400)
    FlowKey.objects.create(pool=POOL, key="heavy", weight=3)
    taken = Counter()
    for _ in range(10):
        taken += keys_of(claim(worker, 10))
    assert taken == {"heavy": 75, "light": 25}


@pytest.mark.django_db
def test_a_more_urgent_lane_goes_before_any_fair_share(worker):
    submit_many("bulk", 50, priority=9)
    submit_many("other", 50, priority=5)
    (urgent,) = submit("bulk", 1, priority=0)
    claimed = claim(worker, 10)
    assert claimed[0].id == urgent.id
    assert [c.priority for c in claimed] == [0] + [5] * 9


@pytest.mark.django_db
def test_an_idle_key_comes_back_without_credit_for_its_idle_time(worker):
    submit_many("steady", 300)
    submit_many("returning", 1)
    complete(worker, claim(worker, 2))  # both keys served once; then "returning" has nothing
    for _ in range(10):
        complete(worker, claim(worker, 10))  # 100 jobs of "steady" alone
    submit_many("returning", 100)
    # Back at the pool lane's virtual time: about half of the next claims, not all of the next
    # hundred (one place ahead: "steady" was charged last for a job at the clock's place).
    taken = keys_of(claim(worker, 20))
    assert taken["returning"] in (10, 11) and sum(taken.values()) == 20


@pytest.mark.django_db
def test_a_key_holds_no_more_leases_than_its_limit(worker):
    submit_many("limited", 20)
    submit_many("free", 20)
    FlowKey.objects.create(pool=POOL, key="limited", max_running=3)
    first = claim(worker, 10)
    assert keys_of(first) == {"limited": 3, "free": 7}
    assert keys_of(claim(worker, 10)) == {"free": 10}  # nothing claimed and handed back: just not taken
    complete(worker, [job for job in first if keys_of([job])["limited"]][:2])
    assert keys_of(claim(worker, 10)) == {"limited": 2, "free": 3}


@pytest.mark.django_db
def test_the_pools_default_limit_applies_to_every_key_without_its_own(worker):
    submit_many("a", 10)
    submit_many("b", 10)
    FlowKey.objects.create(pool=POOL, key="b", max_running=5)
    assert keys_of(claim(worker, 20, flow_limit=2)) == {"a": 2, "b": 5}


@pytest.mark.django_db
def test_a_lost_lease_stops_counting_once_reaped(worker, db_clock):
    """The limit counts jobs that hold leases, not a counter: a worker killed with its jobs leased
    holds the key's room until the reaper takes the leases back, and not longer."""
    submit_many("crashy", 5)
    assert keys_of(claim(worker, 5, flow_limit=2)) == {"crashy": 2}
    assert claim(worker, 5, flow_limit=2) == []
    db_clock.advance(seconds=120)  # the leases expire: the worker is gone
    leases.reap_expired(grace_seconds=0, policy=RetryPolicy(base_seconds=1, cap_seconds=1))
    for job in Job.objects.filter(state=State.FAILED):
        Job.objects.filter(pk=job.pk).update(next_attempt_at=job.next_attempt_at - timedelta(hours=1))
    leases.retries_promote_due()
    assert keys_of(claim(worker, 5, flow_limit=2)) == {"crashy": 2}


@pytest.mark.django_db
def test_a_rate_limited_key_starts_its_burst_then_one_per_spacing_and_the_others_go_on(worker, db_clock):
    """3 starts per 12 s: a burst of 3, then one every 4 s; the other key takes what it leaves."""
    submit_many("rated", 20)
    submit_many("free", 40)
    FlowKey.objects.create(pool=POOL, key="rated", rate_starts=3, rate_seconds=12)
    assert keys_of(claim(worker, 10)) == {"rated": 3, "free": 7}
    assert keys_of(claim(worker, 10)) == {"free": 10}  # not claimed and handed back: just not taken
    db_clock.advance(seconds=3.9)
    assert keys_of(claim(worker, 2)) == {"free": 2}
    db_clock.advance(seconds=0.2)  # 4.1 s after the burst: one start
    assert keys_of(claim(worker, 2)) == {"rated": 1, "free": 1}
    assert keys_of(claim(worker, 2)) == {"free": 2}
    db_clock.advance(seconds=60)  # idle for long: a burst of 3 again, not the 15 it "saved"
    assert keys_of(claim(worker, 10)) == {"rated": 3, "free": 7}


@pytest.mark.django_db
def test_a_rate_limit_counts_every_claimer_and_a_changed_rate_keeps_the_bucket(worker, db_clock):
    """The bucket lies in the database: claims of other workers (other hosts) draw on the same
    starts; a rate set anew applies to what was started before."""
    other = leases.WorkerIdentity(host="other-host", pid=4242, pool=POOL)
    submit_many("rated", 20)
    FlowKey.objects.create(pool=POOL, key="rated", rate_starts=4, rate_seconds=60)
    assert len(claim(worker, 3)) == 3
    assert len(claim(other, 3)) == 1
    assert claim(worker, 3) == claim(other, 3) == []
    leases.flow_settings_changed()
    flows.flow_key_set(pool=POOL, key="rated", actor="test", reason="faster", rate=(8, 60))
    # 4 started by now at 8 per minute: 4 more may start now.
    assert len(claim(other, 10)) == 4
    flows.flow_key_set(pool=POOL, key="rated", actor="test", reason="lifted", rate=None)
    assert len(claim(worker, 20)) == 12  # the rest, at once


@pytest.mark.django_db
def test_a_lowered_rate_holds_a_key_back_for_one_interval_at_most(worker, db_clock):
    submit_many("rated", 700)
    FlowKey.objects.create(pool=POOL, key="rated", rate_starts=600, rate_seconds=60)
    assert len(claim(worker, 100)) == 100  # a burst: 100 of the minute's 600
    flows.flow_key_set(pool=POOL, key="rated", actor="test", reason="their quota fell", rate=(10, 60))
    # 100 starts at 10 a minute would hold it back 10 minutes; the bucket holds at most a minute of
    # the new rate: full, so its next start comes one spacing (6 s) on, and one every 6 s after.
    until = flows.flow_key_read(POOL, "rated")["rate_limited_until"]
    assert 5.5 < (until - db_clock.now()).total_seconds() <= 6
    db_clock.advance(seconds=6.1)
    assert len(claim(worker, 10)) == 1
    assert claim(worker, 10) == []


@pytest.mark.django_db
def test_a_rate_set_while_the_claim_reads_limits_from_its_cache_is_charged(worker):
    """A host whose cached flags say "running limits, no rates" still fills the bucket of a key whose
    rate was set a moment ago: whether to charge comes with the lanes, not from the cache."""
    submit_many("limited", 5)
    submit_many("rated", 5)
    FlowKey.objects.create(pool=POOL, key="limited", max_running=1)
    claim(worker, 2)  # caches: a running limit, no rate limit
    FlowKey.objects.create(pool=POOL, key="rated", rate_starts=2, rate_seconds=60)
    assert keys_of(claim(worker, 10)) == {"rated": 2}  # its bucket's burst; "limited" holds its one
    assert FlowKey.objects.get(pool=POOL, key="rated").rate_tat is not None
    assert claim(worker, 10) == []


@pytest.mark.django_db
def test_a_rate_limit_says_until_when_it_holds_a_key_back(worker, db_clock):
    submit_many("rated", 5)
    FlowKey.objects.create(pool=POOL, key="rated", rate_starts=2, rate_seconds=10)
    assert flows.flow_key_read(POOL, "rated")["rate_limited_until"] is None
    claim(worker, 5)
    now = db_clock.now()
    until = flows.flow_key_read(POOL, "rated")["rate_limited_until"]
    assert timedelta(seconds=4.5) < until - now <= timedelta(seconds=5)  # one spacing: 10 s / 2
    db_clock.advance(seconds=(until - now).total_seconds() + 0.01)
    assert flows.flow_key_read(POOL, "rated")["rate_limited_until"] is None
    assert len(claim(worker, 5)) == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rate", "field"),
    [((0, 10), "rate_starts"), ((10, 0), "rate_seconds"), ((1, 86_401), "rate_seconds"), ((True, 5), "rate_starts")],
)
def test_a_rate_limit_out_of_bounds_is_refused_and_changes_nothing(rate, field):
    with pytest.raises(services.JobInputError) as refused:
        flows.flow_key_set(pool=POOL, key="k", actor="test", reason="r", rate=rate)
    assert refused.value.field == field
    assert not FlowKey.objects.filter(pool=POOL).exists()


@pytest.mark.django_db
def test_a_paused_key_gets_nothing_and_the_others_go_on(worker):
    submit_many("paused", 10)
    submit_many("running", 10)
    FlowKey.objects.create(pool=POOL, key="paused", paused=True, reason="their site asked us to stop")
    assert keys_of(claim(worker, 20)) == {"running": 10}
    FlowKey.objects.filter(key="paused").update(paused=False)
    assert keys_of(claim(worker, 20)) == {"paused": 10}


@pytest.mark.django_db
def test_a_lane_whose_jobs_went_elsewhere_is_read_again_and_the_claim_fills(worker):
    cancelled = submit("gone", 5)
    submit_many("here", 10)
    for job in cancelled:
        services.job_cancel(job_id=job.id, actor="test", reason="not wanted")
    assert keys_of(claim(worker, 10)) == {"here": 10}  # the stale lane's turns went to the other key
    lane = FlowLane.objects.get(pool=POOL, key="gone")
    assert lane.next_due is None  # read again: nothing planned, so out of every claim's way
    submit("gone", 1)
    lane.refresh_from_db()
    assert lane.next_due is not None


@pytest.mark.django_db
def test_a_deferred_job_leaves_its_lane_until_it_is_due(worker, db_clock):
    (job,) = submit("later", 1)
    (claimed,) = claim(worker, 1)
    leases.release(job.id, claimed.lease_version, actor=worker.lease_owner, reason="politeness", delay_seconds=60)
    assert claim(worker, 5) == []
    lane = FlowLane.objects.get(pool=POOL, key="later")
    assert lane.next_due == Job.objects.get(pk=job.pk).due_at  # read again: when it is due
    db_clock.advance(seconds=61)
    assert [c.id for c in claim(worker, 5)] == [job.id]


@pytest.mark.django_db
def test_every_claim_statement_finds_its_lanes_through_the_index(worker):
    submit_many("a", 50)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT l.id FROM jobs_flowlane AS l WHERE l.pool = %s AND l.next_due <= now()"
            " ORDER BY l.priority, l.vtime, l.next_due LIMIT 10",
            [POOL],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "flowlane_turn_idx" in plan, plan


@pytest.mark.django_db
def test_a_lone_lane_is_claimed_from_again_for_a_moment(worker, monkeypatch):
    """A pool with one key waiting claims without reading the lanes for LONE_LANE_SECONDS (as it did
    before keys); a key that comes meanwhile gets its share from the first claim after."""
    monkeypatch.setattr(leases, "LONE_LANE_SECONDS", 60)
    submit_many("first", 100)
    assert keys_of(claim(worker, 10)) == {"first": 10}
    submit_many("second", 10)
    assert keys_of(claim(worker, 10)) == {"first": 10}  # within the moment: the lone lane again
    monkeypatch.setattr(leases, "_lone_lanes", {})  # the moment passed
    assert keys_of(claim(worker, 10)) == {"first": 5, "second": 5}
    lanes = dict(FlowLane.objects.filter(pool=POOL).values_list("key", "vtime"))
    assert lanes == {"first": 5.0, "second": 5.0}  # charged only while they shared the pool


@pytest.mark.django_db
def test_only_the_application_may_run_the_lane_functions_and_only_under_read_committed(settings):
    """They run as the tables' owner: the maintenance role (or PUBLIC) calling the refresh under an old
    snapshot could hide a job from every claim."""
    roles = settings.LEITSTAND_DB_ROLES
    with connection.cursor() as cursor:
        for function in ("jobs_flow_lanes_touch(uuid[])", "jobs_flow_lanes_refresh(bigint[])"):
            cursor.execute(
                "SELECT has_function_privilege(%s, %s, 'EXECUTE'), has_function_privilege(%s, %s, 'EXECUTE')",
                [roles["application"], function, roles["maintenance"], function],
            )
            assert cursor.fetchone() == (True, False), function
    import psycopg

    from tests.support.db import test_database_url

    with psycopg.connect(test_database_url()) as other:  # the application's role, a transaction of its own
        other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.InvalidTransactionState, match="needs READ COMMITTED"):
            other.execute("SELECT jobs_flow_lanes_refresh(ARRAY[1]::bigint[])")


@pytest.mark.django_db
def test_lanes_whose_jobs_went_elsewhere_do_not_empty_a_claim(worker):
    """Thirty keys whose one job each was cancelled still point at a due time; a claim passes over them
    (and reads them again) and takes the live key's jobs."""
    for key in range(30):
        (job,) = submit(f"gone-{key:02d}", 1)
        services.job_cancel(job_id=job.id, actor="test", reason="not wanted")
    submit_many("live", 10)
    assert [len(claim(worker, 5)) for _ in range(3)] == [5, 5, 0]
    assert not FlowLane.objects.filter(pool=POOL, key__startswith="gone-", next_due__isnull=False).exists()


@pytest.mark.django_db
def test_a_paused_key_comes_back_without_credit_for_its_pause(worker):
    submit_many("a", 300)
    submit_many("b", 300)
    submit_many("c", 300)
    FlowKey.objects.create(pool=POOL, key="c", paused=True, reason="asked to stop")
    for _ in range(10):
        complete(worker, claim(worker, 10))  # a and b: 50 each
    FlowKey.objects.filter(key="c").update(paused=False)
    taken = keys_of(claim(worker, 30))
    assert set(taken) == {"a", "b", "c"} and all(9 <= n <= 11 for n in taken.values()), taken  # not 30 for c


@pytest.mark.django_db
def test_a_key_set_with_other_characters_is_the_key_its_jobs_carry(worker):
    from jobs import flows

    submit_many("Bücher", 5)
    flows.flow_key_set(pool=POOL, key="Bücher", actor="test", reason="asked to stop", paused=True)
    assert claim(worker, 5) == []
    assert FlowKey.objects.get(pool=POOL).key == "B%C3%BCcher"


@pytest.mark.django_db
def test_a_name_written_like_an_encoding_is_a_key_of_its_own(worker):
    """Attack (issue 54, item 15): the name 'B%C3%BCcher' was the key of 'Bücher'; pausing it paused
    the other's jobs."""
    submit_many("Bücher", 3)
    flows.flow_key_set(pool=POOL, key="B%C3%BCcher", actor="test", reason="not the books", paused=True)
    assert keys_of(claim(worker, 3)) == {"B%C3%BCcher": 3}  # Bücher's jobs run (as stored)
    assert list(FlowKey.objects.values_list("key", flat=True)) == ["B%25C3%25BCcher"]
    assert {row["key"] for row in flows.flow_keys(POOL)} == {"Bücher", "B%C3%BCcher"}


def test_stored_keys_give_back_their_names():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=300))
    def round_trip(name):
        stored = services.flow_key_stored(name)
        assert len(stored) <= 255 and all(" " <= c <= "~" for c in stored)
        named = services.flow_key_named(stored)
        assert name.startswith(named) and services.flow_key_stored(named) == stored
        if len(stored) < 255 - 12:  # not cut (one character encodes to at most 12)
            assert named == name

    round_trip()
    assert services.flow_key_stored("100%") == "100%25"
    assert services.flow_key_stored("ü" * 200) == "%C3%BC" * 42  # cut between characters, not inside one
