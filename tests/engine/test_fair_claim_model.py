"""The fair claim against a small reference model (Hypothesis, real PostgreSQL).

Random sequences of submit / claim (with and without starting) / complete / hand back / cancel /
pause / running limit / rate limit / rest / floods of keys wider than one claim reads, on one pool
whose jobs are keyed by a payload field. After every claim the model checks what the claim must
guarantee, whatever the sequence:

- **no limit exceeded**: no key holds more leases (reserved *or* running) than its own running
  limit or the pool's default, and no rated key started more jobs in an interval than its rate allows;
- **no due job hidden**: a claim that came back short left no job it could have taken (due, its key
  neither paused, nor at rest, nor full);
- **the most urgent lane first**: no job it could have taken waits in a more urgent lane than a job
  it took — also when more keys are due than one claim reads (``limit + STALE_LANES_SKIPPED``);
- **shares as weighted**: keys of one priority with jobs enough, claimed one job at a time, are
  served within one job of their weights' proportion.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from jobs import flows, insert, leases, services
from jobs.models import LEASED_STATES, FlowKey, FlowRest, Job, State, database_now
from tests.support.db import DatabaseClock

POOL = "modeltest"
KEYS = ("a", "b", "c", "d")
PRIORITIES = (0, 5, 9)
WORKER = leases.WorkerIdentity(host="model", pid=1, pool=POOL)


def submit(key: str, count: int, priority: int, pool: str = POOL) -> None:
    insert.jobs_insert_many(
        [
            {
                "type": POOL,
                "pool": pool,
                "idempotency_key": str(uuid.uuid4()),
                "payload": {"k": key},
                "priority": priority,
                "source": "",
                "max_attempts": 50,
                "schema_version": 1,
                "request_hash": "",
                "flow_key_declaration": "payload.k",
            }
            for _ in range(count)
        ],
        actor="model",
        correlation_id="model",
    )


def claimable(pool: str, default_limit: int | None) -> list[tuple[str, int]]:
    """(key, priority) of each planned, due job the claim could take now, from the rows themselves."""
    now = database_now()
    settings_of = {k.key: k for k in FlowKey.objects.filter(pool=pool)}
    resting = set(FlowRest.objects.filter(pool=pool, until__gt=now).values_list("key", flat=True))
    leased = Counter(Job.objects.filter(pool=pool, state__in=LEASED_STATES).values_list("flow_key", flat=True))
    found = []
    for key, priority in Job.objects.filter(pool=pool, state=State.PLANNED, due_at__lte=now).values_list(
        "flow_key", "priority"
    ):
        setting = settings_of.get(key)
        limit = setting.max_running if setting and setting.max_running is not None else default_limit if key else None
        if setting and setting.paused or key in resting:
            continue
        if limit is not None and leased[key] >= limit:
            continue
        if setting and setting.rate_starts and flows.rate_limited_until(setting, now):
            continue
        found.append((key, priority))
    return found


class FairClaim(RuleBasedStateMachine):
    clock: DatabaseClock

    def __init__(self):
        super().__init__()
        self.pool = f"{POOL}-{uuid.uuid4().hex[:8]}"  # each example a pool of its own (logs cannot be deleted)
        self.worker = leases.WorkerIdentity(host="model", pid=1, pool=self.pool)
        self.default_limit: int | None = None
        self.starts: list[tuple[str, object]] = []  # (key, database time) of every start, for rate limits
        self.rate_since: dict[str, object] = {}  # when each key's rate limit was last set

    @initialize(default_limit=st.sampled_from([None, 1, 2, 3]))
    def pool_default(self, default_limit):
        self.default_limit = default_limit

    @rule(key=st.sampled_from(KEYS), count=st.integers(1, 4), priority=st.sampled_from(PRIORITIES))
    def submit_jobs(self, key, count, priority):
        submit(key, count, priority, self.pool)

    @rule(priority=st.sampled_from((5, 9)), key=st.sampled_from(KEYS), urgent=st.sampled_from(PRIORITIES))
    def flood_of_keys(self, priority, key, urgent):
        """More due keys than one claim reads, then one job of another lane."""
        for n in range(45):
            submit(f"wide-{n}", 1, priority, self.pool)
        submit(key, 1, urgent, self.pool)

    @rule(limit=st.integers(1, 6), start=st.booleans())
    def claim(self, limit, start):
        leases.flow_settings_changed()  # what an operator set is read by the next claim (no second's delay)
        before = claimable(self.pool, self.default_limit)
        claimed = leases.claim(
            pool=self.pool,
            worker=self.worker,
            lease_seconds=600,
            limit=limit,
            start=start,
            flow_limit=self.default_limit,
        )
        now = database_now()
        rows = dict(Job.objects.filter(pk__in=[c.id for c in claimed]).values_list("pk", "flow_key"))
        taken = [(rows[c.id], c.priority) for c in claimed]
        self.starts += [(key, now) for key, _ in taken]
        after = claimable(self.pool, self.default_limit)
        # No limit exceeded: leases, reserved or running, per key.
        leased = Counter(Job.objects.filter(pool=self.pool, state__in=LEASED_STATES).values_list("flow_key", flat=True))
        settings_of = {k.key: k for k in FlowKey.objects.filter(pool=self.pool)}
        took = Counter(key for key, _ in taken)
        for key, count in leased.items():
            if not took[key]:
                continue  # a limit lowered below what a key holds takes no lease back; it only stops new ones
            setting = settings_of.get(key)
            limit_of_key = (
                setting.max_running
                if setting and setting.max_running is not None
                else self.default_limit
                if key
                else None
            )
            assert limit_of_key is None or count <= limit_of_key, (
                f"key {key!r} holds {count} leases, limit {limit_of_key}"
            )
        for key, setting in settings_of.items():
            if setting.rate_starts:
                window = now - timedelta(seconds=setting.rate_seconds)
                window = max(window, self.rate_since[key])  # starts before the rate was set are not its
                started = sum(1 for k, at in self.starts if k == key and at > window)
                assert started <= setting.rate_starts, f"key {key!r} started {started} in {setting.rate_seconds} s"
            assert not (setting.paused and any(k == key for k, _ in taken)), "a paused key got a job"
        # No due job hidden: short only when nothing else could be taken.
        if len(claimed) < limit:
            assert not after, f"claimed {len(claimed)} of {limit} and left claimable: {after[:5]}"
        # The most urgent lane first.
        if taken and after:
            assert min(p for _, p in after) >= max(p for _, p in taken), (
                f"took priority {max(p for _, p in taken)} while priority {min(p for _, p in after)} waited"
            )
        assert len(taken) <= min(limit, len(before))

    # Which job a rule picks is drawn as a number whatever the rows are, so the draws never depend
    # on the database (Hypothesis replays them).
    @rule(pick=st.integers(0, 19))
    def complete_one(self, pick):
        running = list(Job.objects.filter(pool=self.pool, state=State.RUNNING).order_by("id")[:20])
        if running:
            job = running[pick % len(running)]
            leases.complete(job.id, job.lease_version, actor="model")

    @rule(pick=st.integers(0, 19))
    def hand_back_one(self, pick):
        leased = list(Job.objects.filter(pool=self.pool, state__in=LEASED_STATES).order_by("id")[:20])
        if leased:
            job = leased[pick % len(leased)]
            leases.release(job.id, job.lease_version, actor="model", reason="handed back")

    @rule(pick=st.integers(0, 19))
    def cancel_one(self, pick):
        planned = list(Job.objects.filter(pool=self.pool, state=State.PLANNED).order_by("id")[:20])
        if planned:
            services.job_cancel(job_id=planned[pick % len(planned)].id, actor="model", reason="model")

    @rule(key=st.sampled_from(KEYS), paused=st.booleans())
    def pause(self, key, paused):
        flows.flow_key_set(pool=self.pool, key=key, actor="model", reason="model", paused=paused)

    @rule(key=st.sampled_from(KEYS), max_running=st.sampled_from([None, 1, 2]))
    def running_limit(self, key, max_running):
        flows.flow_key_set(pool=self.pool, key=key, actor="model", reason="model", max_running=max_running)

    @rule(key=st.sampled_from(KEYS), rate=st.sampled_from([None, (1, 10), (2, 30)]))
    def rate_limit(self, key, rate):
        flows.flow_key_set(pool=self.pool, key=key, actor="model", reason="model", rate=rate)
        self.rate_since[key] = database_now()

    @rule(key=st.sampled_from(KEYS), seconds=st.sampled_from([0.0, 5.0, 60.0]))
    def rest(self, key, seconds):
        flows.flow_rests_set(pools=[self.pool], key=key, until=database_now() + timedelta(seconds=seconds))

    @rule(seconds=st.sampled_from([1, 11, 31]))
    def time_passes(self, seconds):
        self.clock.advance(seconds)


@pytest.fixture
def model_pool(monkeypatch):
    monkeypatch.setattr(leases, "LONE_LANE_SECONDS", 0)  # the lone lane's pause is a documented latency
    yield


@pytest.mark.django_db
def test_the_claim_keeps_its_guarantees_under_random_operations(model_pool, db_clock):
    FairClaim.clock = db_clock
    run_state_machine_as_test(
        FairClaim,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


@pytest.mark.django_db
def test_the_most_urgent_lane_is_served_when_more_keys_are_due_than_a_claim_reads(model_pool):
    for n in range(leases.STALE_LANES_SKIPPED + 10):
        submit(f"bulk-{n}", 1, 5)
    submit("urgent", 1, 0)
    (job,) = leases.claim(pool=POOL, worker=WORKER, lease_seconds=60, limit=1)
    assert job.priority == 0


@pytest.mark.django_db
def test_a_running_limit_counts_reserved_jobs_too(model_pool):
    submit("a", 6, 5)
    first = leases.claim(pool=POOL, worker=WORKER, lease_seconds=60, limit=3, flow_limit=3)  # reserved, not started
    second = leases.claim(pool=POOL, worker=WORKER, lease_seconds=60, limit=3, flow_limit=3)
    assert (len(first), len(second)) == (3, 0)


@pytest.mark.django_db
def test_shares_follow_the_weights(model_pool):
    for key in ("light", "heavy"):
        submit(key, 40, 5)
    flows.flow_key_set(pool=POOL, key="heavy", actor="model", reason="model", weight=3)
    taken = Counter()
    for _ in range(40):
        (job,) = leases.claim(pool=POOL, worker=WORKER, lease_seconds=60, limit=1, start=True)
        taken[Job.objects.get(pk=job.id).flow_key] += 1
        leases.complete(job.id, job.lease_version, actor="model")
    assert abs(taken["heavy"] - 30) <= 1 and abs(taken["light"] - 10) <= 1, taken
