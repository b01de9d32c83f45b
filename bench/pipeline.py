"""Real work, engine included, against the same work done bare: analysis and crawl on the demo web.

Run: .venv/bin/python -m bench.pipeline [--images 900] [--pages 500] [--latency-ms 50] [--wal-profile]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

The demo web (``workers/pipeline/demoweb.py``, both sites) is served from this process on loopback;
politeness is off for the run (``LEITSTAND_HOST_MIN_DELAY_SECONDS=0``), and each pool runs **one**
worker — per core, and one request in flight per host as politeness always allows.

- **Analysis**, once per version — analysis@1 (one dHash against every original, the baseline) and
  analysis@2 (PDQ and keypoints on the index), ``LEITSTAND_ANALYSIS_VERSION`` of the pool: ``--images``
  candidates (the demo web's nine fetchable images, each under many URLs: ``?n=…``, so every job is a
  candidate of its own) → analysis jobs run by ``runpool analysis``: the whole handler — robots.txt
  (cached), the host's politeness slot, the fetch through the safe client, decode, the comparison,
  thumbnail, the finding through the effect ledger, a recheck plan for a match — and the engine
  around it. The **baseline** of each: a loop over the same images already in memory doing the same
  image work (``images.decode``: verify, decode, dHash, thumbnail; the version's comparison; the
  content hash). The last line: analysis@2's jobs per second against analysis@1's.
- **Crawl**: ``--pages`` crawl jobs for the demo web's pages (each under many URLs, at the source's
  depth so no links are followed; each its own run, so each spawns its analysis jobs afresh) run by
  ``runpool crawl``. The **baseline**: a bare httpx loop fetching the same pages and parsing them
  with the same parser (``extraction.extract``). Both run twice: on loopback as it is, and with every
  answer ``--latency-ms`` late (50: a fast real site's response time).

Rates are taken between the first and the last completion (start-up not counted), as in
``bench.throughput``. Last, what each kind of job cost the database, from its candidate's or its
submission's insert to the pool's last completion: commits, rows inserted, updated and deleted, and
WAL per job (the whole machinery, the control process's sweeps and a crawl's spawned analysis jobs
included); with ``--wal-profile`` where that WAL went, as ``bench.throughput`` shows it.

With ``--tracing``, the newer analysis version's jobs and the loopback crawl run once more with spans
recorded and exported over OTLP/HTTP to a local receiver (``devtools/otlp.py``), reported against the
same work with tracing off, with the spans received per job.
"""

import argparse
import hashlib
import time
import uuid

from django.conf import settings
from django.db import transaction

from bench.throughput import (  # sets Django up
    count,
    database_costs,
    measure,
    per_job,
    spans_settled,
    start,
    stop,
    tracing_env,
    wal_profile,
)
from workers.pipeline import analysis, demoweb, images
from workers.pipeline.extraction import extract
from workers.pipeline.models import Candidate
from workers.pipeline.services import asset_register, source_upsert
from workers.runtime.services import jobs_submit_many

# analysis@1 (one dHash against every original) is the baseline analysis@2 is measured against.
VERSIONS = (analysis.DHASH_VERSION, analysis.PROCESSING_VERSION)
# A job is the worker's until it leaves these (a failed one comes back for its retry).
WORKING = ["planned", "reserved", "running", "failed"]
# What the sites serve without a special behaviour (robots.txt, slowness, 503s, vanishing).
IMAGES = (
    (0, "/img/abendlicht.png"),
    (0, "/img/mohnfeld-klein.jpg"),
    (0, "/img/logo.png"),
    (0, "/img/kreise-collage.jpg"),
    (0, "/img/foto-204.jpg"),
    (1, "/img/stadt.webp"),
    (1, "/img/abendlicht-kopie.jpg"),
    (1, "/img/hafen-mix.jpg"),
    (1, "/img/verschwindet.jpg"),
)
PAGES = ((0, "/"), (0, "/werke/1.html"), (0, "/werke/2.html"), (1, "/"), (1, "/archiv/verschwindet.html"))


def submit(jobs: list[dict]) -> None:
    for first in range(0, len(jobs), 1000):
        jobs_submit_many(jobs[first : first + 1000], actor="bench", correlation_id=f"pipeline-{uuid.uuid4().hex[:8]}")


def remaining(job_type: str):
    return lambda: count("SELECT count(*) FROM jobs_job WHERE type = %s AND state = ANY(%s)", [job_type, WORKING])


def run_pool(pool: str, env: dict, total: int) -> float:
    control = start("control", 1, **env)
    worker = start(pool, 1, **env)
    try:
        return measure(remaining(pool), total)
    finally:
        stop(worker)
        stop(control)


def bare_analysis(bodies: list[bytes], version: str) -> float:
    """The version's image work in a loop over the images in memory: decode (verify, pixels, dHash,
    thumbnail), the comparison with the protected originals (analysis@2: on the database's index,
    as the handler does), the content hash."""
    bands = settings.LEITSTAND_ANALYSIS
    method = analysis.VERSIONS[version]["method"]
    started = time.perf_counter()
    for body in bodies:
        analysis.compare(images.decode(body), bands, method=method)
        hashlib.sha256(body).hexdigest()
    return len(bodies) / (time.perf_counter() - started)


def bare_crawl(urls: list[str]) -> float:
    import httpx

    with httpx.Client(timeout=10) as http:
        started = time.perf_counter()
        for url in urls:
            response = http.get(url)
            extract(response.content, base_url=str(response.url))
        return len(urls) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=900)
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--latency-ms", type=int, default=50, help="the crawl's second run: each answer this late")
    parser.add_argument("--wal-profile", action="store_true", help="where each kind's WAL went (pg_waldump)")
    parser.add_argument("--tracing", action="store_true", help="also with spans exported to a local OTLP receiver")
    args = parser.parse_args()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with demoweb.DemoWeb(vanish_after=86400) as web:
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        sources = [source_upsert(**spec) for spec in web.sources()]
        env = {"LEITSTAND_HTTP_ALLOWED_TARGETS": ",".join(web.targets), "LEITSTAND_HOST_MIN_DELAY_SECONDS": "0"}
        tag = uuid.uuid4().hex[:8]

        # Analysis, per version: the candidates, their jobs, the pool; then the same images bare.
        analyses, costs = [], {}
        for version in VERSIONS:
            image_urls = [
                (sources[site].pk, f"{web.base_url(site)}{path[1:]}?n={n}&v={version}")
                for n in range(args.images)
                for site, path in [IMAGES[n % len(IMAGES)]]
            ]
            before = database_costs()
            with transaction.atomic():
                candidates = Candidate.objects.bulk_create(
                    [Candidate(image_url=url, page_url=url, source_id=source) for source, url in image_urls]
                )
            submit(
                [
                    {"job_type": "analysis", "payload": {"candidate_id": c.pk}, "idempotency_key": f"{tag}-{c.pk}"}
                    for c in candidates
                ]
            )
            pool_env = {**env, "LEITSTAND_ANALYSIS_WORKERS": "1", "LEITSTAND_ANALYSIS_VERSION": version}
            rate = run_pool("analysis", pool_env, len(candidates))
            costs[f"{version} job"] = before, database_costs(), len(candidates)
            import httpx

            bodies = [httpx.get(url).content for _, url in image_urls]
            analyses.append((version, rate, bare_analysis(bodies, version)))

        # Crawl: one job per page URL, each its own run; then the same pages bare.
        page_jobs = []
        for n in range(args.pages):
            site, path = PAGES[n % len(PAGES)]
            source = sources[site]
            url = f"{web.base_url(site)}{path[1:]}?n={n}"
            payload = {"source_id": source.pk, "url": url, "depth": source.max_depth, "run": f"{tag}-{n}"}
            page_jobs.append({"job_type": "crawl", "payload": payload, "idempotency_key": f"{tag}-page-{n}"})
        crawls = []
        for latency_ms in (0, args.latency_ms):
            for site in web.sites:
                site.latency_seconds = latency_ms / 1000
            jobs = [
                {
                    **job,
                    "payload": {**job["payload"], "run": f"{job['payload']['run']}-{latency_ms}"},
                    "idempotency_key": f"{job['idempotency_key']}-{latency_ms}",
                }
                for job in page_jobs
            ]
            before = database_costs()
            submit(jobs)
            crawl = run_pool("crawl", env, len(jobs))
            costs[f"crawl job ({latency_ms} ms)"] = before, database_costs(), len(jobs)
            crawls.append((latency_ms, crawl, bare_crawl([job["payload"]["url"] for job in jobs])))
        spawned = count("SELECT count(*) FROM jobs_job WHERE type = 'analysis' AND parent_id IS NOT NULL")

        # Tracing off and on, each run once more as it ran above (now warm: robots.txt, the originals'
        # index and the pages' candidates exist), the second run exporting its spans.
        traced = []
        if args.tracing:
            from devtools.otlp import OtlpReceiver

            for site in web.sites:
                site.latency_seconds = 0
            receiver = OtlpReceiver()
            version = VERSIONS[-1]
            pool_env = {**env, "LEITSTAND_ANALYSIS_WORKERS": "1", "LEITSTAND_ANALYSIS_VERSION": version}
            rates, spans = {}, {}
            for phase, extra in (("off", {}), ("on", tracing_env(receiver))):
                with transaction.atomic():
                    candidates = Candidate.objects.bulk_create(
                        [
                            Candidate(image_url=url, page_url=url, source_id=sources[site].pk)
                            for n in range(args.images)
                            for site, path in [IMAGES[n % len(IMAGES)]]
                            for url in [f"{web.base_url(site)}{path[1:]}?n={n}&tracing={phase}"]
                        ]
                    )
                submit(
                    [
                        {
                            "job_type": "analysis",
                            "payload": {"candidate_id": c.pk},
                            "idempotency_key": f"{phase}-{c.pk}",
                        }
                        for c in candidates
                    ]
                )
                rates["analysis", phase] = run_pool("analysis", {**pool_env, **extra}, len(candidates))
                spans["analysis", phase] = spans_settled(receiver) / len(candidates)
                jobs = [
                    {
                        **job,
                        "payload": {**job["payload"], "run": f"{job['payload']['run']}-tracing-{phase}"},
                        "idempotency_key": f"{job['idempotency_key']}-tracing-{phase}",
                    }
                    for job in page_jobs
                ]
                submit(jobs)
                before_crawl = spans_settled(receiver)
                rates["crawl", phase] = run_pool("crawl", {**env, **extra}, len(jobs))
                spans["crawl", phase] = (spans_settled(receiver) - before_crawl) / len(jobs)
                receiver.spans.clear()
            receiver.close()
            for kind, name in (("analysis", f"{version} analysis jobs"), ("crawl", "crawl jobs, loopback")):
                traced.append((name, rates[kind, "off"], rates[kind, "on"], spans[kind, "on"]))

    print("\none worker per pool; politeness off; demo web on loopback (served by this process)")
    print(f"{'work':<62} {'per s':>8} {'of bare':>8}")
    for version, rate, bare in analyses:
        print(f"{f'{version}: bare loop over the images in memory ({args.images})':<62} {bare:>8.1f} {1:>8.2f}")
        print(f"{f'{version}: analysis jobs, end to end ({args.images})':<62} {rate:>8.1f} {rate / bare:>8.2f}")
    (old_version, old_rate, _), (new_version, new_rate, _) = analyses
    print(f"{f'{new_version} jobs against {old_version} jobs, per core':<62} {'':>8} {new_rate / old_rate:>8.2f}")
    for latency_ms, crawl, crawl_bare in crawls:
        site = f"pages answered after {latency_ms} ms"
        print(f"{f'crawl, bare httpx loop: fetch and parse ({args.pages}; {site})':<62} {crawl_bare:>8.1f} {1:>8.2f}")
        print(f"{f'crawl jobs, end to end ({args.pages}; {site})':<62} {crawl:>8.1f} {crawl / crawl_bare:>8.2f}")
    print(f"(the crawl jobs spawned {spawned} analysis jobs, left unrun)")
    for name, off, on, spans in traced:
        print(f"{f'{name}, again, tracing off':<62} {off:>8.1f} {1:>8.2f}")
        label = f"{name}, again, tracing on (OTLP to a local receiver)"
        print(f"{label:<62} {on:>8.1f} {on / off:>8.2f} of tracing off; {spans:.1f} spans per job")
    print("\nwhat a real job costs the database, from its candidate or submission to its end (spawns included)")
    for name, (before, after, jobs) in costs.items():
        print(f"{name:<24} {per_job(before, after, jobs)}")
        if args.wal_profile:
            print(wal_profile(before[4], after[4], jobs, top=12))


if __name__ == "__main__":
    main()
