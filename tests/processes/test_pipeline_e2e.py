"""End to end: the demo web crawled by real pools (control, crawl, analysis) yields the expected
findings, review cases, skipped, retried and dead jobs."""

import pytest

from jobs.models import Job, State
from tests.support.pools import PoolProcesses, demo_web_env, wait_for
from workers.pipeline import demoweb
from workers.pipeline.models import Candidate, Finding
from workers.pipeline.services import asset_register, crawl_start, source_upsert

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SETTLED = {State.DONE, State.DEAD, State.RECHECK_DUE, State.READY_FOR_REVIEW, State.CANCELLED}

# What analysis must conclude for each image of the demo web (see workers/pipeline/demoweb.py).
EXPECTED = {
    (0, "img/abendlicht.png"): "match",
    (0, "img/mohnfeld-klein.jpg"): "match",
    (0, "img/logo.png"): "no_match",
    (0, "img/kreise-collage.jpg"): "unclear",
    (0, "img/foto-204.jpg"): "no_match",
    (0, "img/abendlicht-gespiegelt.jpg"): "match",  # mirrored: analysis@2's hash
    (0, "img/mohnfeld-ausschnitt.jpg"): "match",  # cropped and turned: analysis@2's keypoints
    (1, "img/stadt.webp"): "match",
    (1, "img/abendlicht-kopie.jpg"): "match",
    (1, "img/hafen-mix.jpg"): "unclear",
    (1, "img/foto-204.jpg"): "no_match",
    (1, "img/verschwindet.jpg"): "match",
}


def test_the_demo_web_crawled_by_real_pools(tmp_path):
    with demoweb.DemoWeb(slow_seconds=1.0) as web:
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        sources = [source_upsert(**source) for source in web.sources()]
        pools = PoolProcesses(
            str(tmp_path),
            **demo_web_env(web),
            LEITSTAND_ANALYSIS_WORKERS="2",
        )
        try:
            for name in ("control", "crawl", "analysis"):
                pools.start(name)
            crawl_start(actor="test", sources=sources, run="e2e")
            wait_for(
                lambda: pools.check_running()
                and Job.objects.filter(type="analysis").count() == len(EXPECTED)
                and not Job.objects.exclude(state__in=SETTLED).exists(),
                timeout=90,
                interval=0.5,
                message="every crawl and analysis job to settle",
            )
        except AssertionError:
            unsettled = Job.objects.exclude(state__in=SETTLED)
            raise AssertionError(
                f"unsettled: {[(j.type, j.payload, j.state, j.error_message) for j in unsettled]}; "
                f"crawl log: {pools.log('crawl')[-2000:]}"
            ) from None
        finally:
            pools.stop_all()

        site = {source.id: i for i, source in enumerate(sources)}
        verdicts = {}
        for candidate in Candidate.objects.all():
            index = site[candidate.source_id]
            # The same bytes on both sites (foto-204) are compared once: one candidate points at the
            # other's finding.
            finding = candidate.same_as or Finding.objects.get(candidate=candidate)
            verdicts[index, candidate.image_url.removeprefix(web.base_url(index))] = finding.verdict
        assert verdicts == EXPECTED
        pointing = Candidate.objects.filter(same_as__isnull=False)
        assert [c.image_url.rsplit("/", 1)[1] for c in pointing] == ["foto-204.jpg"]
        assert pointing[0].same_as.candidate.image_url.endswith("/img/foto-204.jpg")

        analyses = {j.payload["candidate_id"]: j for j in Job.objects.filter(type="analysis")}
        for finding in Finding.objects.all():
            job = analyses[finding.candidate_id]
            assert job.id == finding.job_id
            assert (
                job.state
                == {"match": State.RECHECK_DUE, "no_match": State.DONE, "unclear": State.READY_FOR_REVIEW}[
                    finding.verdict
                ]
            )
            assert job.parent.type == "crawl" and job.correlation_id == job.parent.correlation_id

        crawls = {j.payload["url"].split("/", 3)[3]: j for j in Job.objects.filter(type="crawl")}
        assert Job.objects.filter(type="crawl").count() == 10
        # The second site's sitemap lists a page no link reaches: found, crawled, its image known already.
        assert crawls["archiv/nur-im-sitemap.html"].state == State.DONE
        assert crawls["archiv/nur-im-sitemap.html"].parent.type == "sitemap"
        assert crawls["private/intern.html"].completion_reason.startswith("skipped: disallowed by robots.txt")
        assert (crawls["archiv/fehlt.html"].state, crawls["archiv/fehlt.html"].error_class) == (
            State.DEAD,
            "workers.pipeline.fetching.PageGone",
        )
        flaky = crawls["archiv/wackelig.html"]
        assert (flaky.state, flaky.attempts) == (State.DONE, 3), "503 twice with Retry-After, then 200"
        assert all(crawls[p].state == State.DONE for p in ("", "werke/1.html", "werke/2.html", "archiv/langsam.html"))
        served = [path for site in web.sites for _, path in site.requests]
        assert "/private/intern.html" not in served and "/img/intern.png" not in served
        assert served.count("/robots.txt") == 2, "robots.txt is fetched once per site and shared by all workers"
