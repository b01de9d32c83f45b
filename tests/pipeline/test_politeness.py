"""Per-host politeness in PostgreSQL: one request in flight per host across threads, delays and
Retry-After honoured, and the circuit breaker opening and closing."""

import threading
import time

import pytest
from django.db import connection

from tests.support.hostile_server import HostileServer
from workers.pipeline.http import FetchPolicy, SafeClient
from workers.pipeline.politeness import HostBusy, PolitenessPolicy, host_acquire, host_release, polite

POLICY = PolitenessPolicy(
    min_delay_seconds=0.2, retry_after_cap_seconds=30, hold_seconds=10, failures_to_open=3, open_for_seconds=60
)


@pytest.mark.django_db
def test_one_slot_per_host_then_the_delay(db_clock):
    assert host_acquire("a.example:443", POLICY).wait_seconds == 0.0
    assert host_acquire("a.example:443", POLICY).wait_seconds > 0, "one request in flight per host"
    assert host_acquire("b.example:443", POLICY).wait_seconds == 0.0, "other hosts are independent"
    host_release("a.example:443", POLICY, ok=True, outcome="200", crawl_delay=5)
    wait = host_acquire("a.example:443", POLICY).wait_seconds
    assert 4.5 < wait <= 5, "Crawl-delay spaces the requests"
    db_clock.advance(6)
    assert host_acquire("a.example:443", POLICY).wait_seconds == 0.0


@pytest.mark.django_db
def test_refused_callers_book_turns_one_spacing_apart(db_clock):
    assert host_acquire("t.example:443", POLICY).wait_seconds == 0.0
    turns = [host_acquire("t.example:443", POLICY, crawl_delay=1.0) for _ in range(3)]
    assert [t.reason for t in turns] == ["a request to this host is in flight"] * 3
    waits = [t.wait_seconds for t in turns]
    assert [round(w) for w in waits] == [1, 2, 3], "each waiting job comes back at its own turn"
    host_release("t.example:443", POLICY, ok=True, outcome="200", crawl_delay=1.0)
    db_clock.advance(1.01)
    assert host_acquire("t.example:443", POLICY).wait_seconds == 0.0, "the first booked turn gets the slot"


@pytest.mark.django_db
def test_retry_after_is_honoured_up_to_the_cap(db_clock):
    host_acquire("c.example:443", POLICY)
    host_release("c.example:443", POLICY, ok=False, outcome="429", retry_after=3600)
    assert 29 < host_acquire("c.example:443", POLICY).wait_seconds <= 30


@pytest.mark.django_db
def test_the_breaker_opens_after_repeated_failures_and_closes_after_its_cool_off(db_clock):
    for _ in range(3):
        db_clock.advance(1)
        assert host_acquire("d.example:443", POLICY).wait_seconds == 0.0
        host_release("d.example:443", POLICY, ok=False, outcome="503")
    db_clock.advance(1)
    with pytest.raises(HostBusy, match="circuit breaker open") as busy:
        with polite("d.example:443", POLICY):
            pass
    assert 55 < busy.value.retry_after <= 60
    db_clock.advance(60)
    with polite("d.example:443", POLICY) as outcome:
        outcome.update(ok=True, status=200)
    # The failures doubled the delay (0.2 → 1.6 s), which held for the request that succeeded.
    assert 1.5 < host_acquire("d.example:443", POLICY).wait_seconds <= 1.6
    db_clock.advance(1.7)
    assert host_acquire("d.example:443", POLICY).wait_seconds == 0.0, "a success closed the breaker"


@pytest.mark.django_db(transaction=True)
def test_workers_never_overlap_requests_to_one_host():
    """Four threads (four database sessions) fetch from one real server; it never sees two at once."""
    with HostileServer() as server:
        client = SafeClient(FetchPolicy(), allowed_targets=frozenset({server.target}))
        policy = PolitenessPolicy(min_delay_seconds=0.05, hold_seconds=10)
        sent, errors = [], []

        def worker():
            try:
                deadline = time.monotonic() + 20
                done = 0
                while done < 5 and time.monotonic() < deadline:
                    try:
                        with polite(server.target, policy) as outcome:
                            result = client.fetch(server.url("/slow"))
                            outcome.update(ok=True, status=result.status)
                            done += 1
                            sent.append(1)
                    except HostBusy as busy:
                        time.sleep(min(busy.retry_after, 0.05))
            except Exception as exc:  # surfaced below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(sent) == 20
        assert server.max_in_flight == 1
        starts = sorted(server.slow_started)
        # Start to start: at least the delay, and at least the 0.1 s the previous answer took (one in flight).
        assert all(later - earlier >= 0.1 - 0.01 for earlier, later in zip(starts, starts[1:])), (
            "each request began only after the previous one ended and its delay from the previous start"
        )


def test_no_turn_is_booked_past_the_longest_wait(db):
    """Callers refused far out must not push the host's bookings further for everyone after them."""
    from workers.pipeline.models import HostState

    policy = PolitenessPolicy(min_delay_seconds=60, max_wait_seconds=300)
    assert host_acquire("spiral.example:80", policy).wait_seconds == 0  # the slot: in flight
    waits = [host_acquire("spiral.example:80", policy).wait_seconds for _ in range(12)]
    assert waits[:5] == pytest.approx([60, 120, 180, 240, 300], abs=1)
    assert all(300 < wait < 361 for wait in waits[5:]), "beyond the horizon: asked again, not booked"
    booked = HostState.objects.get(host="spiral.example:80").next_turn_at
    assert host_acquire("spiral.example:80", policy).wait_seconds < 361
    assert HostState.objects.get(host="spiral.example:80").next_turn_at == booked


@pytest.mark.django_db
def test_a_job_at_its_booked_turn_is_served(db_clock):
    """Turns are booked from request starts, and the rest after an answer counts from its start too:
    a job that comes back at its turn finds the host free, even when the answer before it was slow."""
    host = "turns.example:443"
    assert host_acquire(host, POLICY, crawl_delay=1.0).wait_seconds == 0.0
    waits = [host_acquire(host, POLICY, crawl_delay=1.0).wait_seconds for _ in range(3)]
    assert waits == pytest.approx([1, 2, 3], abs=0.05)
    for turn in range(3):
        db_clock.advance(0.4)  # the answer takes 0.4 s
        host_release(host, POLICY, ok=True, outcome="200", crawl_delay=1.0, answer_seconds=0.4)
        db_clock.advance(0.6)  # the next booked turn: one delay after the last start
        assert host_acquire(host, POLICY, crawl_delay=1.0).wait_seconds == 0.0, f"booked turn {turn + 1} refused"


def delay_of(host):
    from workers.pipeline.models import HostState

    return HostState.objects.get(host=host).delay_seconds


@pytest.mark.django_db
def test_a_slow_host_gets_a_longer_delay_and_a_fast_one_keeps_the_least(db_clock):
    slow, fast = "slow.example:443", "fast.example:443"
    for host, answer in ((slow, 2.0), (fast, 0.01)):
        for _ in range(4):
            assert host_acquire(host, POLICY).wait_seconds == 0.0
            db_clock.advance(answer)
            rest_until = host_release(host, POLICY, ok=True, outcome="200", answer_seconds=answer)
            db_clock.advance(max((rest_until - db_clock.now()).total_seconds(), 0) + 0.001)
    # Halfway towards twice the answer's time at each answer: 0.2 → 2.1 → 3.05 → 3.525 → 3.7625 s.
    assert delay_of(slow) == pytest.approx(3.7625)
    assert delay_of(fast) == pytest.approx(POLICY.min_delay_seconds), "never below the least delay"
    assert host_acquire(slow, POLICY).wait_seconds == 0.0
    db_clock.advance(2.0)
    host_release(slow, POLICY, ok=True, outcome="200", answer_seconds=2.0)
    # The next start is one (new) delay after this one's start: 3.88 s after it, 1.88 s from now.
    assert host_acquire(slow, POLICY).wait_seconds == pytest.approx(1.88, abs=0.02)


@pytest.mark.django_db
def test_a_429_with_retry_after_slows_the_host_down_and_holds_it(db_clock):
    host = "busy.example:443"
    assert host_acquire(host, POLICY).wait_seconds == 0.0
    host_release(host, POLICY, ok=False, outcome="429", retry_after=5, answer_seconds=0.05)
    assert 4.9 < host_acquire(host, POLICY).wait_seconds <= 5.0, "Retry-After holds the host from the answer"
    assert delay_of(host) == pytest.approx(0.4), "an error doubles the delay; it never speeds a host up"
    db_clock.advance(5.0)
    assert host_acquire(host, POLICY).wait_seconds == 0.0
    host_release(host, POLICY, ok=True, outcome="200", answer_seconds=0.01)
    assert delay_of(host) == pytest.approx(0.3), "a good answer brings it back halfway"


@pytest.mark.django_db
def test_the_learned_delay_stays_between_the_crawl_delay_and_the_cap(db_clock):
    assert host_acquire("cd.example:443", POLICY, crawl_delay=3).wait_seconds == 0.0
    host_release("cd.example:443", POLICY, ok=True, outcome="200", crawl_delay=3, answer_seconds=0.01)
    assert delay_of("cd.example:443") == pytest.approx(3), "never below the site's Crawl-delay"
    assert host_acquire("huge.example:443", POLICY).wait_seconds == 0.0
    db_clock.advance(500)
    host_release("huge.example:443", POLICY, ok=True, outcome="200", answer_seconds=500)
    assert delay_of("huge.example:443") == pytest.approx(POLICY.crawl_delay_cap_seconds), "capped"


@pytest.mark.django_db
def test_a_release_tells_the_host_keyed_pools_when_the_host_may_next_be_asked(db_clock):
    from jobs.models import FlowRest

    host = "frontier.example:443"
    assert host_acquire(host, POLICY, crawl_delay=2.0).wait_seconds == 0.0
    until = host_release(host, POLICY, ok=True, outcome="200", crawl_delay=2.0, answer_seconds=0.1)
    rests = dict(FlowRest.objects.filter(key=host).values_list("pool", "until"))
    assert rests == {"crawl": until}, "the crawl pool's claim takes no page of this host before then"
