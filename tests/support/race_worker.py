"""A worker process for the race test: claims and completes jobs of one type until all are done.

Now and then it stalls past its lease, as a paused VM or a long GC would, so that other processes
reap and re-claim its job and its late writes must be refused. Prints its counts as JSON.
"""

import argparse
import collections
import json
import random
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--type", required=True)
    parser.add_argument("--lease", type=float, default=0.4)
    parser.add_argument("--stall-probability", type=float, default=0.02)
    parser.add_argument("--stall-seconds", type=float, default=1.2)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--deadline", type=float, default=120)
    args = parser.parse_args()

    django.setup()
    from jobs import leases
    from jobs.models import Job, State
    from jobs.retry import RetryPolicy

    policy = RetryPolicy(base_seconds=0.01, cap_seconds=0.05, max_attempts=1000)
    me = leases.WorkerIdentity.of_this_process(pool="race")
    rng = random.Random(args.seed)
    counts = collections.Counter()
    deadline = time.monotonic() + args.deadline
    while time.monotonic() < deadline:
        counts["reaped"] += len(leases.reap_expired(grace_seconds=0, policy=policy))
        leases.retries_promote_due()
        claimed = leases.claim(pool=args.type, worker=me, lease_seconds=args.lease, limit=rng.randint(1, 5))
        if not claimed:
            if not Job.objects.filter(type=args.type).exclude(state=State.RESULT_STORED).exists():
                break
            time.sleep(0.005)
            continue
        counts["claimed"] += len(claimed)
        for job in claimed:
            try:
                leases.start(job.id, job.lease_version, actor=me.lease_owner)
                if rng.random() < args.stall_probability:
                    counts["stalled"] += 1
                    time.sleep(args.stall_seconds)
                leases.complete(
                    job.id, job.lease_version, actor=me.lease_owner, result_ref=f"{me.lease_owner}#{job.lease_version}"
                )
                counts["completed"] += 1
            except leases.StaleAttempt:
                counts["refused"] += 1
    else:
        counts["deadline_reached"] = 1
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
