"""Where a worker's claim starts (workers/runtime/claim_front.py), on real claims: while the pool
works through a backlog its claims move their flow lanes' next due time past the jobs they took, so
the next claim does not visit the entries a long transaction keeps alive (the reason it exists); a
job that goes back into line behind them lowers its lane's next due time and is found at once."""

from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction

from jobs import leases
from jobs.models import FlowLane, Job, State
from tests.support.clock import Clock
from tests.support.db import OWNER
from tests.support.db import test_database_url as database_url
from workers.runtime.claim_front import WALK_SECONDS, ClaimFront

LEASE = 30.0


@pytest.fixture
def front():
    return ClaimFront(clock=Clock())


@pytest.fixture
def take(worker):
    calls = []

    def take(limit, due_from):
        calls.append(due_from)
        return leases.claim(
            pool="crawl", worker=worker, lease_seconds=LEASE, limit=limit, advance_lanes=due_from is not None
        )

    take.calls = calls
    return take


def backlog(make_job, db_clock, jobs: int) -> list[Job]:
    """``jobs`` planned jobs, due a second apart, the first ten minutes ago."""
    start = db_clock.now() - timedelta(minutes=10)
    return [make_job(due_at=start + timedelta(seconds=n)) for n in range(jobs)]


def test_a_backlog_is_claimed_from_the_front_in_line_order(front, take, make_job, db_clock):
    jobs = backlog(make_job, db_clock, 7)
    claimed = [job.id for _ in range(3) for job in front.claim(take, 2)]
    assert claimed == [job.id for job in jobs[:6]]
    assert take.calls == [None, jobs[0].due_at, jobs[2].due_at], "the first walks the whole line, then the front"


def test_a_claim_from_the_front_also_takes_an_older_job_of_a_less_urgent_lane(front, take, make_job, db_clock):
    jobs = backlog(make_job, db_clock, 3)
    bulk = make_job(priority=9, due_at=db_clock.now() - timedelta(hours=1))  # a less urgent lane, older
    front.claim(take, 2)
    assert [job.id for job in front.claim(take, 2)] == [jobs[2].id, bulk.id]
    assert take.calls == [None, jobs[0].due_at]


def test_a_job_back_in_line_behind_the_front_is_found_by_the_next_claim(front, take, make_job, db_clock, worker):
    jobs = backlog(make_job, db_clock, 8)
    first, _ = front.claim(take, 2)
    front.claim(take, 2)
    leases.release(first.id, first.lease_version, actor=worker.lease_owner, reason="handed back")
    assert Job.objects.get(pk=first.id).state == State.PLANNED and first.due_at < front.due_at
    assert [job.id for job in front.claim(take, 2)] == [first.id, jobs[4].id], "its lane's next due time went back"


def test_no_backlog_means_whole_walks_only(front, take, make_job, db_clock):
    job = backlog(make_job, db_clock, 1)[0]
    assert [c.id for c in front.claim(take, 5)] == [job.id]
    later = make_job(due_at=db_clock.now() - timedelta(hours=2))
    assert [c.id for c in front.claim(take, 5)] == [later.id]
    assert take.calls == [None, None]


def test_whole_walks_take_a_bounded_share_of_the_time(take, make_job, db_clock):
    clock = Clock()
    front = ClaimFront(clock=clock)
    backlog(make_job, db_clock, 6)

    def slow(limit, due_from):
        if due_from is None:
            clock.now += 1.0  # a whole walk that takes a second
        return take(limit, due_from)

    front.claim(slow, 2)
    clock.now += WALK_SECONDS
    front.claim(slow, 2)
    walked, then = take.calls
    assert walked is None and then is not None, "a walk of a second is followed by 20 s from the front"


def test_once_walks_are_expensive_claims_start_at_the_front_whatever_they_find(take, make_job, db_clock):
    clock = Clock()
    front = ClaimFront(clock=clock)
    jobs = backlog(make_job, db_clock, 3)
    bulk = make_job(priority=9, due_at=db_clock.now() - timedelta(hours=1))

    def slow(limit, due_from):
        if due_from is None:
            clock.now += 0.5  # a whole walk behind a long transaction
        return take(limit, due_from)

    front.claim(slow, 2)
    assert [job.id for job in front.claim(slow, 2)] == [jobs[2].id, bulk.id], "each lane from its next due time"
    assert [job.id for job in front.claim(slow, 2)] == [], "an empty claim keeps the front"
    assert take.calls == [None, jobs[0].due_at, bulk.due_at]


@pytest.mark.django_db(transaction=True)
def test_from_the_front_a_claim_does_not_visit_what_a_long_transaction_keeps(make_job, worker, db_clock):
    jobs = backlog(make_job, db_clock, 300)
    with psycopg.connect(database_url(user=OWNER), autocommit=True) as report:
        report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        report.execute("SELECT count(*) FROM jobs_job")  # a snapshot from before the claims
        leases.claim(pool="crawl", worker=worker, lease_seconds=LEASE, limit=250, advance_lanes=True)
        connection.cursor().execute("VACUUM jobs_job")  # removes nothing the report can still see
        front = FlowLane.objects.get(pool="crawl", priority=5, key=jobs[0].flow_key).next_due
        whole, from_front = (
            heap_fetches(
                "SELECT id FROM jobs_job WHERE state = 'planned' AND pool = 'crawl' AND priority = 5"
                " AND flow_key = 'example.org:443' AND due_at <= now() AND due_at >= %s::timestamptz"
                " ORDER BY flow_key, due_at, id LIMIT 10",  # the lane's walk: job_flow_idx's order
                due_from,
            )
            for due_from in ("-infinity", front)
        )
        report.execute("COMMIT")
    assert front == jobs[250].due_at, "the claim moved its lane's next due time past the jobs it took"
    assert whole >= 250, "a walk of the whole lane visits every entry the report keeps alive"
    assert from_front <= 20, f"from its next due time it does not ({from_front} visits)"
    assert Job.objects.filter(state=State.PLANNED).count() == len(jobs) - 250


def heap_fetches(query: str, due_from) -> int:
    """The heap visits of a lane's walk: the ordered scan of ``job_flow_idx`` a claim takes on a real
    backlog. On 300 rows the planner may as well sort another index's 50, so sorting is priced out,
    and the order names the key: with every job of one key, ``job_claim_idx`` (pool, priority, due
    time) filtered by key would cost the planner the same, and it chose either."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + query, [due_from])
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "job_flow_idx" in plan, plan
    return sum(int(line.split("Heap Fetches:")[1]) for line in plan.splitlines() if "Heap Fetches:" in line)
