"""The cluster of network namespaces (issue 19): PostgreSQL with scram on a bridge, PgBouncer in
transaction mode, three worker hosts with their own addresses and host names, the control process on
two of them, and the faults between hosts — a worker host and the leader's host cut off, a host
killed outright, PgBouncer and PostgreSQL restarted. Nothing may be lost or done twice. As root."""

import os
import shutil

import httpx
import pytest

from devtools import cluster, faults, pgbouncer

pytestmark = [pytest.mark.processes]


@pytest.fixture(scope="module")
def up():
    if os.geteuid() != 0:
        pytest.fail(
            "the cluster test needs root (network namespaces and a bridge): run the test command as root, as CI does"
        )
    if shutil.which("ip") is None or pgbouncer.program() is None:
        pytest.fail("the cluster test needs iproute2 and Debian's pgbouncer (scripts/test installs them as root)")
    if cluster.STATE.exists():
        cluster.down()  # what an interrupted run left
    built = cluster.up(hosts=3, workers=1)
    yield built
    cluster.down()


def test_the_console_shows_the_three_hosts_and_the_leader(up):
    registry = "worker processes seen by the registry: h1 1, h2 1, h3 1"
    cluster.wait_until(lambda: registry in cluster.status_text(up), timeout=30, what="three hosts in the registry")
    web = f"http://{up.hosts[0].address}:{cluster.WEB_PORT}"
    with httpx.Client(base_url=web, timeout=10) as browser:
        browser.get("/admin/login/")
        browser.post(
            "/admin/login/?next=/admin/",
            data={"username": "operator", "password": up.passwords["operator"], "next": "/admin/"},
            headers={"X-CSRFToken": browser.cookies["csrftoken"], "Referer": f"{web}/admin/login/"},
        )
        home = browser.get("/admin/").text
    hosts = home[home.index('id="hosts"') :]
    assert all(f"<td>{name}</td>" in hosts for name in ("h1", "h2", "h3")), hosts[:3000]
    assert 'id="control-leader"' in hosts and "term 1" in hosts


def test_faults_between_hosts_lose_nothing_and_repeat_nothing(up):
    lines = []
    results = cluster.drill(up, jobs_per_fault=8, out=lines.append)
    print("\n".join(lines))  # the drill's summary, in the test's output

    assert cluster.drill_failures(results) == [], results
    assert results["verdict"].effects == results["verdict"].jobs == 8 * 4, results
    # Rescue takes the lease (4 s) and its grace (2 s) to run out, the reaper's round, and the retry's
    # backoff; a bound far above that, so only a rescue that does not happen by itself fails here.
    assert results[faults.PARTITION_WORKER_HOST] < 30 and results[faults.KILL_HOST] < 30, results
    assert (
        results[faults.PARTITION_LEADER_HOST] < float(cluster.HOST_TIMING["LEITSTAND_CONTROL_LEADER_LEASE_SECONDS"]) + 5
    )
    assert results["server_connections"] <= cluster.POOL_SIZE < results["clients"], results
