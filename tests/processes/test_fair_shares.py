"""Fair shares between flow keys in real pools (issue 39): a small key beside a flood, weights 3:1,
and a running limit that holds while workers and the control process are killed.

Synthetic jobs share their pool by client (``client:<name>``, their key namespace); they run here in
the synthetic pool, whose jobs they are (the crawl pool keys its pages by host, one in flight each)."""

import os
import signal
import threading
import time
import uuid

import psutil
import pytest
from django.db import connections

from jobs import flows, insert, leases
from jobs.models import Attempt, Job, State
from tests.support.pools import PoolProcesses, wait_for
from workers.runtime.services import pool_pause, pool_resume

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

MAX_BATCH = 100  # LEITSTAND_MAX_BATCH (the default): the most one claim takes


@pytest.fixture
def pools(tmp_path):
    # One set of processes per test, stopped before the test's database is flushed: processes that
    # outlive a test write (leader lease, heartbeats) while the flush truncates, and the two deadlock.
    processes = PoolProcesses(str(tmp_path))  # leases of 2 s (FAST_TIMING)
    processes.start("control")
    processes.start("synthetic")
    yield processes
    processes.stop_all()


def flood(client: str, count: int, *, payload: dict | None = None) -> None:
    """``count`` synthetic jobs of ``client`` in the synthetic pool, in statements of 1,000."""
    for start in range(0, count, 1000):
        insert.jobs_insert_many(
            [
                {
                    "type": "synthetic",
                    "pool": "synthetic",
                    "idempotency_key": uuid.uuid4().hex,
                    "payload": {"pool": "synthetic", **(payload or {})},
                    "priority": 5,
                    "source": "",
                    "max_attempts": 5,
                    "schema_version": 1,
                    "request_hash": "",
                    "flow_key_declaration": "client",
                }
                for _ in range(min(1000, count - start))
            ],
            actor="test",
            correlation_id=f"flood-{client}",
            key_namespace=f"client:{client}",
        )


def start_order() -> list[str]:
    """The flow keys of the synthetic pool's jobs in the order their first attempts were claimed."""
    return list(
        Attempt.objects.filter(pool="synthetic", lease_version=1)
        .order_by("claimed_at", "id")
        .values_list("job__flow_key", flat=True)
    )


def test_a_small_client_starts_within_its_share_and_weights_divide_the_pool(pools):
    pool_pause(pool="synthetic", actor="test", reason="queue the flood first")
    flood("A", 20_000)
    flood("B", 100)
    pool_resume(pool="synthetic", actor="test", reason="go")
    wait_for(
        lambda: Job.objects.filter(flow_key="client:B", state=State.RESULT_STORED).count() == 100,
        timeout=60,
        message="client B's 100 jobs",
    )
    order = start_order()
    last_b = max(i for i, key in enumerate(order) if key == "client:B")
    # 1:1 between two keys: B's 100 jobs are among the first 200 places, give or take the claims of
    # both workers that were under way (each takes at most MAX_BATCH, half of them B's).
    assert last_b + 1 <= 200 + 2 * MAX_BATCH, f"B's last job started as job {last_b + 1}"
    a_waiting = Job.objects.filter(flow_key="client:A", state=State.PLANNED).count()
    assert a_waiting > 10_000, "B finished while A still had most of its flood waiting"

    # Weights 3:1 for two flooding clients, measured over 4,000 starts while both have plenty left (a
    # wake-up under way when the pool is paused goes on for its budget: some start before).
    pool_pause(pool="synthetic", actor="test", reason="queue the next floods")
    wait_for(lambda: not Job.objects.filter(state__in=[State.RESERVED, State.RUNNING]).exists(), timeout=30)
    # The rest of A's flood goes on below as a third key at weight 1: C, D and A share 3:1:1.
    flows.flow_key_set(pool="synthetic", key="client:C", actor="test", reason="worth more", weight=3)
    flood("C", 8000)
    flood("D", 8000)
    started = len(start_order())
    pool_resume(pool="synthetic", actor="test", reason="go")
    wait_for(lambda: len(start_order()) >= started + 4000, timeout=120, message="4,000 more starts")
    later = start_order()[started : started + 4000]
    c, d = later.count("client:C"), later.count("client:D")
    assert 0.9 * 3 <= c / d <= 1.1 * 3, f"C {c}, D {d}: {c / d:.2f}"


def test_a_running_limit_holds_while_workers_and_the_control_process_are_killed(pools):
    flows.flow_key_set(pool="synthetic", key="client:L", actor="test", reason="a partner's limit", max_running=5)
    time.sleep(leases.LIMITS_SECONDS + 0.2)  # the claims' reading of the keys' limits is this old at most
    flood("L", 300, payload={"duration_ms": 40})
    flood("M", 300, payload={"duration_ms": 40})
    highest, samples, stop = [0], [0], threading.Event()

    def sample() -> None:
        try:
            while not stop.is_set():
                running = Job.objects.filter(
                    pool="synthetic", flow_key="client:L", state__in=[State.RESERVED, State.RUNNING]
                ).count()
                highest[0] = max(highest[0], running)
                samples[0] += 1
                time.sleep(0.1)
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for round in range(3):
            time.sleep(1.5)
            # Its supervisor (a busy machine may still be starting it, or starting it again).
            supervisor = wait_for(
                lambda: next(iter(psutil.Process(pools.processes["synthetic"].pid).children()), None),
                timeout=30,
                message="the synthetic pool's supervisor",
            )
            workers = [p for p in supervisor.children() if "pusher" not in p.name() and "monitor" not in p.name()]
            for worker in workers[:1]:
                os.kill(worker.pid, signal.SIGKILL)
            if round == 1:
                os.killpg(pools.processes["control"].pid, signal.SIGKILL)
                pools.processes["control"].wait(timeout=10)
                pools.processes.pop("control")
                pools.start("control")
        wait_for(
            lambda: Job.objects.filter(flow_key__in=["client:L", "client:M"], state=State.PLANNED).count() == 0
            and not Job.objects.filter(flow_key="client:L", state__in=[State.RESERVED, State.RUNNING]).exists(),
            timeout=120,
            message="both clients' jobs to run",
        )
    finally:
        stop.set()
        sampler.join(timeout=5)
    assert samples[0] > 50
    assert highest[0] == 5, f"client L ran {highest[0]} at once (limit 5)"
    assert Job.objects.filter(flow_key="client:L", state=State.RESULT_STORED).count() == 300


def test_a_rate_limit_spaces_a_keys_starts_across_the_pools_workers(pools):
    """10 starts per 2 s for client R, counted in PostgreSQL by every worker of the pool: a burst of
    10, then one start every 0.2 s — in any stretch of time t, at most 10 + 5 t starts (and one more
    for a claim under way) — while client N, without a limit, runs beside it."""
    starts, seconds = 10, 2
    flows.flow_key_set(pool="synthetic", key="client:R", actor="test", reason="their API", rate=(starts, seconds))
    time.sleep(leases.LIMITS_SECONDS + 0.2)  # the claims' reading of the keys' limits is this old at most
    flood("R", 40)
    flood("N", 200, payload={"duration_ms": 20})
    wait_for(
        lambda: Job.objects.filter(flow_key__in=["client:R", "client:N"], state=State.RESULT_STORED).count() == 240,
        timeout=60,
        message="both clients' jobs to run",
    )
    claimed = [
        moment.timestamp()
        for moment in Attempt.objects.filter(job__flow_key="client:R")
        .order_by("claimed_at")
        .values_list("claimed_at", flat=True)
    ]
    assert len(claimed) == 40
    for i, first in enumerate(claimed):
        for j in range(i, len(claimed)):
            bound = starts + (claimed[j] - first) * starts / seconds + 1
            assert j - i + 1 <= bound, f"{j - i + 1} starts in {claimed[j] - first:.2f} s (at most {bound:.1f})"
    # The limit spaces the starts, and does not starve them: 30 after the burst take 6 s.
    assert 5.5 <= claimed[-1] - claimed[0] <= 10, f"R's 40 starts took {claimed[-1] - claimed[0]:.1f} s"
    n_last = (
        Attempt.objects.filter(job__flow_key="client:N").order_by("-claimed_at").values_list("claimed_at", flat=True)
    )
    assert n_last[0].timestamp() < claimed[-1], "client N waited for rate-limited client R"
