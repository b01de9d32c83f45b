"""Two control processes on two (named) hosts: one leads; stopped (SIGSTOP, as a host cut off from the
network looks to the others) past its lease, the other leads in a newer term; woken up, the old one
does not act; killed, it is replaced within a lease (issue 19)."""

import os
import signal

import pytest

from jobs.models import LeaderLease
from tests.support.pools import PoolProcesses, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LEASE = 2.0


def lease():
    return LeaderLease.objects.filter(name="control").values_list("holder", "term").first()


def test_the_leader_is_replaced_in_a_new_term_and_the_old_one_does_not_act(tmp_path):
    processes = PoolProcesses(str(tmp_path), LEITSTAND_CONTROL_LEADER_LEASE_SECONDS=str(LEASE))
    try:
        processes.start("control", key="control-a", LEITSTAND_HOST_NAME="host-a")
        processes.start("control", key="control-b", LEITSTAND_HOST_NAME="host-b")
        holder, term = wait_for(lease, timeout=30, message="a control process leads")
        leader = "control-a" if holder.startswith("host-a:") else "control-b"
        follower = "control-b" if leader == "control-a" else "control-a"
        pid = processes.processes[leader].pid

        os.killpg(pid, signal.SIGSTOP)
        try:
            new_holder, new_term = wait_for(
                lambda: (row := lease()) and row[1] > term and row, timeout=LEASE * 5, message="another leads"
            )
        finally:
            os.killpg(pid, signal.SIGCONT)
        assert new_holder.split(":")[0] == follower.replace("control-", "host-") and new_term == term + 1
        wait_for(
            lambda: "no longer leading" in processes.log(leader), timeout=LEASE * 5, message="the old one steps down"
        )
        assert lease() == (new_holder, new_term), "the woken leader did not take the lease back"
        processes.check_running()

        os.killpg(processes.processes[follower].pid, signal.SIGKILL)  # the new leader dies outright
        processes.processes.pop(follower)
        wait_for(lambda: lease()[1] == new_term + 1, timeout=LEASE * 5, message="the first one leads again")
        assert lease()[0].startswith(holder.split(":")[0] + ":")
    finally:
        processes.stop_all()
