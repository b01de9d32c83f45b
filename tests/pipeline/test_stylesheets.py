"""A page's own linked stylesheets (issue 53): their background images found, each stylesheet asked
once per crawl run, politely, and one that cannot be read named on the step without hiding the page's
other images."""

import pytest

from jobs.models import Job, State, StepEvent
from tests.support.hostile_web import HostileWeb, Page
from workers.pipeline.models import Candidate
from workers.pipeline.services import crawl_start, source_upsert

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pages_own_stylesheets_are_read_once_per_run_and_a_broken_one_hides_nothing(settings, pool_runtime):
    with HostileWeb() as site:
        head = (
            '<link rel="stylesheet" href="/static/site.css"><link rel="stylesheet" href="/static/gone.css">'
            '<link rel="stylesheet" href="http://127.0.0.2:9/elsewhere.css">'
        )
        site.pages.update(
            {
                "/": Page(body=f'{head}<a href="/second.html">2</a><img src="/img/own.jpg">'.encode()),
                "/second.html": Page(body=head.encode()),
                "/static/site.css": Page(
                    body=b"@font-face{src:url(/f.woff2)} .hero{background:#fff url(../img/from-css.jpg) no-repeat}",
                    content_type="text/css; charset=utf-8",
                ),
            }
        )
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [site.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        source = source_upsert(name="Styled", base_url=site.url("/"), max_depth=1, sitemaps="off")
        crawl_start(actor="test", sources=[source], run="styled")
        runtime = pool_runtime("crawl")
        while runtime.wake().claimed:
            pass

    pages = list(Job.objects.filter(type="crawl").order_by("created_at"))
    assert [job.state for job in pages] == [State.DONE, State.DONE]
    from_css = Candidate.objects.get(image_url=site.url("/img/from-css.jpg"))
    assert from_css.found_in == "css stylesheet"
    assert Candidate.objects.filter(image_url=site.url("/img/own.jpg")).exists()
    assert not Candidate.objects.filter(image_url__contains="woff").exists()
    # Asked once for the run (the second page read it from the first's visit), the missing one named.
    assert [path for path, _ in site.requests].count("/static/site.css") == 1
    assert [path for path, _ in site.requests].count("/static/gone.css") == 1
    first = StepEvent.objects.get(job=pages[0], step="stylesheets").data
    assert first["other_hosts"] == 1
    assert [(s["url"].removeprefix(site.url("")), s.get("images"), "error" in s) for s in first["stylesheets"]] == [
        ("/static/site.css", 1, False),
        ("/static/gone.css", None, True),
    ]
    second = StepEvent.objects.get(job=pages[1], step="stylesheets").data
    assert {s["read"] for s in second["stylesheets"]} == {"earlier in this run"}
