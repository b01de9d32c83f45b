"""A second crawl of an unchanged web: what it costs against the first (conditional requests, issue 23).

Run: .venv/bin/python -m bench.recrawl [--workers 2]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

The demo web (both sites) on loopback, politeness at 0.05 s, a real control process and crawl and
analysis pools. The **baseline** is the first crawl run (nothing fetched before); the second run,
started when the first has finished, crawls the same unchanged sites: its pages and images are asked
with ``If-None-Match`` / ``If-Modified-Since``, and a ``304`` is neither downloaded nor analysed.
Reported per run, from the run's batch: crawl and analysis jobs, bytes downloaded (the ``fetch``
steps' bytes), requests the sites answered with a body and with ``304``, and the wall time.
"""

import argparse
import time

from django.db import connection

from bench.throughput import start, stop  # sets Django up
from jobs.models import Batch, Job, database_now
from workers.pipeline import demoweb
from workers.pipeline.models import Source
from workers.pipeline.services import asset_register, crawl_start, source_upsert

COSTS = """
SELECT count(*) FILTER (WHERE j.type = 'crawl'), count(*) FILTER (WHERE j.type = 'analysis'),
       coalesce((SELECT sum((e.data->>'bytes')::bigint) FROM jobs_stepevent AS e
                 JOIN jobs_job AS k ON k.id = e.job_id WHERE k.batch_id = %(batch)s AND e.step = 'fetch'), 0)
FROM jobs_job AS j WHERE j.batch_id = %(batch)s
"""


def crawl_run(web, sources, name: str) -> dict:
    answered = [len(site.requests) for site in web.sites]
    started = time.monotonic()
    crawl_start(actor="bench", sources=sources, run=name)
    batch = Batch.objects.get(key=f"crawl-run:{name}")
    deadline = time.monotonic() + 300
    while not Batch.objects.filter(pk=batch.pk, finished_at__isnull=False).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {name} did not finish within 300 s")
        time.sleep(0.2)
    seconds = time.monotonic() - started
    with connection.cursor() as cursor:
        cursor.execute(COSTS, {"batch": batch.pk})
        crawls, analyses, downloaded = cursor.fetchone()
    fetched = sum(len(site.requests) - before for site, before in zip(web.sites, answered))
    unchanged = Job.objects.filter(batch=batch, completion_reason__contains="(304)").count()
    return {
        "crawl jobs": crawls,
        "analysis jobs": analyses,
        "bytes downloaded": downloaded,
        "requests": fetched,
        "jobs ended unchanged (304)": unchanged,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with demoweb.DemoWeb(slow_seconds=0.2, vanish_after=86400) as web:
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        sources = [source_upsert(**spec) for spec in web.sources()]
        # Their schedules' current slots count as taken: only this benchmark's two runs crawl them.
        Source.objects.update(last_slot_at=database_now())
        env = {
            "LEITSTAND_HTTP_ALLOWED_TARGETS": ",".join(web.targets),
            "LEITSTAND_HOST_MIN_DELAY_SECONDS": "0.05",
            "LEITSTAND_ANALYSIS_WORKERS": str(args.workers),
        }
        processes = [start(pool, args.workers, **env) for pool in ("control", "crawl", "analysis")]
        try:
            time.sleep(5)
            first = crawl_run(web, sources, "first")
            second = crawl_run(web, sources, "second")
        finally:
            for process in processes:
                stop(process)
    print("\nthe demo web crawled twice, unchanged between the runs")
    print(f"{'':<28} {'first (baseline)':>17} {'second':>10} {'second ÷ first':>15}")
    for key in first:
        ratio = f"{second[key] / first[key]:.3f}" if first[key] else "—"
        print(f"{key:<28} {first[key]:>17,} {second[key]:>10,} {ratio:>15}")


if __name__ == "__main__":
    main()
