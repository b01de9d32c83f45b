"""The corpus of issue 53 crawled by the real pools (`runpool control`, `runpool crawl`): a site whose
pages each show one image the way CMSs, shops, share tags and lazy loaders write it. Every image is
found and recorded with where it was found (a linked stylesheet's background too); nothing a
placeholder or a script link names is recorded; a link that answers with an image is a candidate and one that answers with a PDF is left alone, both
`done` with the reason on the job."""

import pytest

from jobs.models import Job, State, StepEvent
from tests.support.hostile_web import HostileWeb, Page, png
from tests.support.image_corpus import PATTERNS, page
from tests.support.pools import PoolProcesses, wait_for
from workers.pipeline.models import Candidate
from workers.pipeline.services import crawl_start, source_upsert

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_the_image_corpus_crawled_by_the_real_pool(tmp_path):
    with HostileWeb() as site:
        index = "".join(f'<a href="/corpus/{name}.html">{name}</a>' for name in PATTERNS)
        index += '<a href="/download?id=7">full size</a><a href="/report">report</a><a href="/styled.html">css</a>'
        site.pages["/"] = Page(body=index.encode())
        site.pages.update({f"/corpus/{name}.html": Page(body=page(name)) for name in PATTERNS})
        site.pages["/download?id=7"] = Page(body=png(), content_type="image/png")
        site.pages["/styled.html"] = Page(body=b'<link rel="stylesheet" href="/static/site.css"><div class="hero">')
        site.pages["/static/site.css"] = Page(
            body=b".hero { background-image: url('../img/stylesheet.jpg') }", content_type="text/css"
        )
        site.pages["/report"] = Page(body=b"%PDF-1.7 " + b"x" * 200_000, content_type="application/pdf")
        source = source_upsert(
            name="Corpus", base_url=site.url("/"), max_depth=1, max_links_per_page=100, max_images_per_page=20
        )
        pools = PoolProcesses(
            str(tmp_path), LEITSTAND_HTTP_ALLOWED_TARGETS=site.target, LEITSTAND_HOST_MIN_DELAY_SECONDS="0"
        )
        expected_crawls = len(PATTERNS) + 4
        try:
            for name in ("control", "crawl"):
                pools.start(name)
            crawl_start(actor="test", sources=[source], run="corpus")
            wait_for(
                lambda: pools.check_running()
                and Job.objects.filter(type="crawl").count() == expected_crawls
                and not Job.objects.filter(type="crawl").exclude(state__in=[State.DONE, State.DEAD]).exists(),
                timeout=120,
                interval=0.5,
                message="every crawl job to end",
            )
        finally:
            pools.stop_all()

        crawls = {job.payload["url"].removeprefix(site.url("")): job for job in Job.objects.filter(type="crawl")}
        assert {job.state for job in crawls.values()} == {State.DONE}, {
            url: (job.state, job.error_message) for url, job in crawls.items() if job.state != State.DONE
        }
        candidates = {c.image_url.removeprefix(site.url("")): c for c in Candidate.objects.all()}
        table = []
        for name, pattern in PATTERNS.items():
            candidate = candidates.get(pattern.image)
            table.append((name, candidate is not None, candidate.found_in if candidate else "—"))
            assert candidate is not None, name
            assert candidate.found_in == pattern.found_in, name
            assert set(candidate.variants) >= {site.url(v) for v in pattern.variants}, name
        assert candidates["/img/stylesheet.jpg"].found_in == "css stylesheet"
        table.append(("css-linked-stylesheet", True, "css stylesheet"))
        assert not [url for url in candidates if "data:" in url or "javascript" in url or "/media/" in url]
        # A linked image found only by its answer: a candidate, the link's job done, nothing downloaded twice.
        image = candidates["/download?id=7"]
        assert image.found_in == "a href (answered image/png)"
        assert crawls["/download?id=7"].completion_reason == "not a page but an image (image/png): handed to analysis"
        assert Job.objects.filter(type="analysis", payload__candidate_id=image.id).exists()
        assert crawls["/report"].completion_reason.startswith("not a page: ")
        fetch = StepEvent.objects.get(job=crawls["/report"], step="fetch")
        assert (fetch.outcome, fetch.data["content_type"]) == ("skipped", "application/pdf")
        # Every placeholder, blank and script link counted on its page's step, never recorded.
        extract = StepEvent.objects.get(job=crawls["/corpus/lazysizes-data-src.html"], step="extract").data
        assert extract["ignored"]["data:"] == 1 and extract["ignored"]["javascript:"] == 1
        assert extract["found_in"] == {"img data-src": 1}
        print("\n".join(f"{name:28} {'found' if ok else 'MISSED':6} {where}" for name, ok, where in table))
