"""The hostile-web corpus crawled by real pools (control, crawl, analysis as `runpool` processes): one
site whose pages carry the attacks of issue 35 together. Each attack ends with its reason on its own
item; every other item of the page and the run is done, and no worker process dies."""

import pytest

from jobs.models import Job, State, StepEvent, Transition
from tests.support.hostile_web import HostileWeb, Page, jpeg_with_scans, png
from tests.support.pools import PoolProcesses, wait_for
from workers.pipeline.models import Candidate
from workers.pipeline.services import asset_register, crawl_start, source_upsert

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SETTLED = {State.DONE, State.DEAD, State.RECHECK_DUE, State.READY_FOR_REVIEW, State.CANCELLED, State.FAILED}


def test_the_hostile_corpus_crawled_by_real_pools(tmp_path):
    long_link = "/next?" + "&".join(f"utm_{i}=campaign-{i:04d}" for i in range(14))
    with HostileWeb() as site:
        site.pages.update(
            {
                "/robots.txt": Page(
                    body=b"\xef\xbb\xbfUser-agent: LeitstandBot\nX-Foo: y\nDisallow: /private\nCrawl-delay: 999999999\n",
                    content_type="text/plain",
                ),
                "/": Page(
                    body=(
                        f"<a href='{long_link}'>next</a><a href='/a/../private/x.html'>private</a>"
                        f"<a href='/moved.html'>moved</a><a href='/busy.html'>busy</a>"
                        f"<img src='/img/{'写' * 1900}.png'><img src='/bomb.jpg'><img src='/img/ok.png'>"
                        "<a href='/c\x01.html'>control</a>"
                    ).encode(),
                    content_type="text/html; charset=punycode",
                ),
                long_link: Page(body=b"<img src='/img/ok2.png'>"),
                "/moved.html": Page(302, b"", "text/plain", [("Location", "/private/y.html")]),
                "/busy.html": Page(503, b"busy", "text/plain", [("Retry-After", "²")]),
                "/bomb.jpg": Page(body=jpeg_with_scans(5000), content_type="image/jpeg"),
                "/img/ok.png": Page(body=png((20, 160, 40)), content_type="image/png"),
                "/img/ok2.png": Page(body=png((40, 20, 160)), content_type="image/png"),
            }
        )
        asset_register(name="red", owner_ref="owner-1", data=png((200, 30, 30), (128, 128)))
        source = source_upsert(name="Hostile", base_url=site.url("/"), max_depth=1)
        pools = PoolProcesses(
            str(tmp_path),
            LEITSTAND_HTTP_ALLOWED_TARGETS=site.target,
            LEITSTAND_HOST_MIN_DELAY_SECONDS="0",
            LEITSTAND_HOST_CRAWL_DELAY_CAP_SECONDS="0.05",
        )
        try:
            for name in ("control", "crawl", "analysis"):
                pools.start(name)
            crawl_start(actor="test", sources=[source], run="hostile")
            wait_for(
                lambda: pools.check_running()
                and Job.objects.filter(type="crawl").count() == 5
                and Job.objects.filter(type="analysis").count() == 3
                and not Job.objects.exclude(state__in=SETTLED).exists(),
                timeout=90,
                interval=0.5,
                message="every crawl and analysis job to settle",
            )
        finally:
            pools.stop_all()

        crawls = {job.payload["url"].removeprefix(site.url("")): job for job in Job.objects.filter(type="crawl")}
        assert set(crawls) == {"/", long_link, "/private/x.html", "/moved.html", "/busy.html"}
        assert crawls["/"].state == State.DONE
        assert crawls[long_link].state == State.DONE
        assert crawls["/private/x.html"].completion_reason.startswith("skipped: disallowed by robots.txt")
        assert crawls["/moved.html"].completion_reason.startswith("skipped:") and "redirects to" in (
            crawls["/moved.html"].completion_reason
        )
        busy = crawls["/busy.html"]  # retried on its backoff ('²' is no Retry-After), never a crash
        assert busy.error_class == "workers.pipeline.fetching.SiteUnavailable" and busy.state != State.DONE
        extracted = StepEvent.objects.get(job=crawls["/"], step="extract").data
        assert extracted["urls_unusable"] == 2

        analyses = {
            Candidate.objects.get(pk=job.payload["candidate_id"]).image_url.removeprefix(site.url("")): job
            for job in Job.objects.filter(type="analysis")
        }
        assert (analyses["/bomb.jpg"].state, analyses["/bomb.jpg"].error_class) == (
            State.DEAD,
            "workers.pipeline.images.ImageRefused",
        )
        assert analyses["/img/ok.png"].state == State.DONE and analyses["/img/ok2.png"].state == State.DONE
        assert not site.asked("/private/x.html") and not site.asked("/private/y.html")
        assert not Transition.objects.filter(cause__startswith="worker died").exists(), "no worker process died"
