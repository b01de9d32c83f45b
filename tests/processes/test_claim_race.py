"""Real processes race for the same jobs: each job ends completed exactly once, leases never overlap,
and every late write of a stalled worker is refused and recorded."""

import json
import subprocess
import uuid

import pytest
from django.db import connection

from jobs import insert
from jobs.models import Attempt, Job, StaleWrite, State, Transition
from tests.support.db import child_env, python_process

JOBS = 1000
PROCESSES = 4


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_four_processes_claim_and_complete_a_thousand_jobs_exactly_once():
    job_type = f"race-{uuid.uuid4().hex[:8]}"
    for n in range(JOBS):
        insert.job_insert(
            type=job_type,
            idempotency_key=f"race-{n}",
            payload={"n": n},
            actor="test",
            priority=n % 10,
            max_attempts=100,
        )

    env = child_env()
    workers = [
        python_process(
            "tests.support.race_worker",
            "--type",
            job_type,
            "--seed",
            str(seed),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(PROCESSES)
    ]
    counts = []
    for process in workers:
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
        counts.append(json.loads(out.strip().splitlines()[-1]))
    print("race worker counts:", counts)
    assert not any(c.get("deadline_reached") for c in counts), counts

    jobs = Job.objects.filter(type=job_type)
    assert jobs.count() == JOBS
    assert set(jobs.values_list("state", flat=True)) == {State.RESULT_STORED}
    assert sum(c.get("completed", 0) for c in counts) == JOBS, "each job was completed exactly once"
    assert Transition.objects.filter(job__type=job_type, to_state=State.RESULT_STORED).count() == JOBS
    # The result that stands is the one written by the attempt that held the lease at the end.
    for lease_version, result_ref in jobs.values_list("lease_version", "result_ref"):
        assert result_ref.endswith(f"#{lease_version}")
    completed = Attempt.objects.filter(job__type=job_type, outcome=Attempt.Outcome.COMPLETED)
    assert completed.count() == JOBS
    assert not Attempt.objects.filter(job__type=job_type, finished_at__isnull=True).exists()

    with connection.cursor() as cursor:
        # No two attempts of a job held its lease at the same time: each attempt ended (completed,
        # reaped, released) before the next one was claimed.
        cursor.execute(
            """
            SELECT count(*) FROM (
                SELECT a.claimed_at, lag(a.finished_at) OVER (PARTITION BY a.job_id ORDER BY a.lease_version) AS previous_end
                FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id WHERE j.type = %s
            ) t WHERE previous_end > claimed_at
        """,
            [job_type],
        )
        assert cursor.fetchone()[0] == 0

    refused = sum(c.get("refused", 0) for c in counts)
    assert sum(c.get("stalled", 0) for c in counts) > 0, counts
    assert refused > 0, "a stalled worker's late writes must have been refused"
    assert StaleWrite.objects.filter(job__type=job_type).count() == refused
    assert Attempt.objects.filter(job__type=job_type).count() == sum(c.get("claimed", 0) for c in counts)
