"""The leader lease (issue 19): one control process leads in a term; when its lease expires another
takes over in a newer term; a deposed leader's writes are refused and recorded; an election cannot
overtake a running fenced transaction; the control loop runs every sweep fenced."""

import threading

import psycopg
import pytest
from django.db import OperationalError, connection

from jobs import leadership
from jobs.leadership import CONTROL, Deposed, fenced, leader_claim, leading
from jobs.models import DeposedWrite, LeaderLease
from tests.support.db import test_database_url as database_url

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_leads_until_its_lease_expires_then_another_leads_in_a_newer_term(db_clock):
    first = leader_claim(CONTROL, "host-a:1:aa", 10)
    assert first is not None and first.number == 1
    assert leader_claim(CONTROL, "host-a:1:aa", 10) == first, "a renewal keeps the term"
    assert leader_claim(CONTROL, "host-b:2:bb", 10) is None, "another waits while the lease holds"
    db_clock.advance(11)
    second = leader_claim(CONTROL, "host-b:2:bb", 10)
    assert second is not None and second.number == 2
    assert leader_claim(CONTROL, "host-a:1:aa", 10) is None, "the old leader, back, does not lead"
    lease = LeaderLease.objects.get(name=CONTROL)
    assert (lease.holder, lease.term) == ("host-b:2:bb", 2)

    db_clock.advance(11)  # its own lease ran out and nobody took it: taking it back is a new term
    assert leader_claim(CONTROL, "host-b:2:bb", 10).number == 3


def test_a_deposed_leaders_fenced_write_is_refused_and_recorded(db_clock, monkeypatch):
    import workers.runtime.control as control
    from workers.runtime.sweeps import Stage, Sweeps

    old = leader_claim(CONTROL, "host-a:1:aa", 10)
    with leading(old), fenced("probe"):
        LeaderLease.objects.filter(name="probe-row").delete()  # a write, allowed in its term
    db_clock.advance(11)
    new = leader_claim(CONTROL, "host-b:2:bb", 10)

    with pytest.raises(Deposed, match="term 1 of host-a:1:aa is over"), leading(old), fenced("probe"):
        pass
    writes = []
    registry = Sweeps()
    registry.register("writes", lambda: writes.append(DeposedWrite.objects.count()), stage=Stage.ENGINE)
    registry.register("after", lambda: writes.append("never"), stage=Stage.OBSERVE)
    monkeypatch.setattr(control, "sweeps", registry)

    assert control._round(old) == {}, "the round ends at the refused write"
    assert writes == []
    refused = DeposedWrite.objects.get()
    assert (refused.holder, refused.term, refused.operation) == ("host-a:1:aa", 1, "writes")
    assert (refused.current_holder, refused.current_term) == ("host-b:2:bb", new.number)
    assert control._round(new) == {"writes": None, "after": None} and writes == [1, "never"]


def test_outside_a_leaders_sweep_the_fence_does_nothing_and_inside_it_needs_a_transaction():
    with fenced("command"):
        pass  # a management command or a test calls a sweep's function directly
    term = leader_claim(CONTROL, "host-a:1:aa", 10)
    with leading(term), pytest.raises(RuntimeError, match="inside a transaction"):
        leadership.fence("unfenced")


def test_an_election_cannot_overtake_a_running_fenced_transaction():
    old = leader_claim(CONTROL, "host-a:1:aa", 1)
    outcome = {}

    def challenger():  # its own connection, after the old lease expired, while the old term writes
        with psycopg.connect(database_url(), autocommit=True) as other:
            other.execute("SET lock_timeout = '300ms'")
            try:
                other.execute(leadership._CLAIM, {"name": CONTROL, "holder": "host-b:2:bb", "lease": 10})
                outcome["claimed"] = True
            except psycopg.errors.LockNotAvailable:
                outcome["claimed"] = False

    with leading(old), fenced("long sweep"):
        connection.cursor().execute("SELECT pg_sleep(1.2)")  # the lease expires meanwhile
        thread = threading.Thread(target=challenger)
        thread.start()
        thread.join()
    assert outcome == {"claimed": False}, "the election waited for the fenced transaction"
    assert leader_claim(CONTROL, "host-b:2:bb", 10).number == 2, "and succeeds once it ended"


def test_a_fenced_transaction_of_a_stopped_leader_ends_after_one_lease():
    term = leader_claim(CONTROL, "host-a:1:aa", 1)
    with leading(term), fenced("hung"):
        timeout = connection.cursor()
        timeout.execute("SHOW idle_in_transaction_session_timeout")
        assert timeout.fetchone()[0] == "1s"


def test_a_clean_shutdown_hands_the_lease_over_at_once():
    term = leader_claim(CONTROL, "host-a:1:aa", 60)
    leadership.leader_release(term)
    assert leader_claim(CONTROL, "host-b:2:bb", 60).number == 2


def test_the_claim_gives_up_when_the_row_stays_locked():
    leader_claim(CONTROL, "host-a:1:aa", 0.2)
    with psycopg.connect(database_url()) as other:
        other.execute("SELECT pg_sleep(0.3)")
        other.execute("SELECT 1 FROM jobs_leaderlease FOR SHARE")  # a (former) leader's open transaction
        with pytest.raises(OperationalError, match="lock timeout"):
            leader_claim(CONTROL, "host-b:2:bb", 10, lock_timeout_ms=200)
