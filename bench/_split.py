import statistics
import time
import uuid

from django.core.management import call_command
from django.db import transaction

import bench.submission as bs
from jobs import leases
from workers.runtime.services import jobs_submit_many

call_command("migrate", verbosity=0)
bs.load(200_000)


def run():
    r = uuid.uuid4().hex[:10]
    jobs = bs.crawl_jobs(r, 1000)
    spec = [
        {
            "job_type": j["type"],
            "payload": j["payload"],
            "idempotency_key": j["idempotency_key"],
            "priority": 7,
            "source": "",
            "request_hash": "x",
        }
        for j in jobs
    ]
    orig = leases.insert_planned_many
    times = {}

    def timed(**kw):
        a = time.perf_counter()
        out = orig(**kw)
        times["sql"] = time.perf_counter() - a
        return out

    leases.insert_planned_many = timed
    with transaction.atomic():
        t2 = time.perf_counter()
        jobs_submit_many(spec, actor="b", correlation_id=f"c-{r}")
        t3 = time.perf_counter()
    leases.insert_planned_many = orig
    return (t3 - t2 - times["sql"]) * 1000, times["sql"] * 1000


run()
rows = [run() for _ in range(5)]
for name, i in (("submit python", 0), ("insert statement", 1)):
    print(f"{name:<20} {statistics.median(r[i] for r in rows):6.1f} ms")
