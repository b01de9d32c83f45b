"""Sitemaps (issue 53): a source's pages found from the sitemaps its robots.txt names as well as by
its links — indexes, gzip, the image extension, lastmod — and the hostile ones refused with a reason:
a gzip bomb, entity expansion, an index that lists itself, entries outside the source's scope."""

import gzip

import pytest

from jobs.models import Job, State, StepEvent
from jobs.services import JobInputError
from tests.support.hostile_web import HostileWeb, Page
from workers.pipeline.models import Candidate, PageState, Source
from workers.pipeline.services import crawl_start, sitemaps_read, source_upsert
from workers.pipeline.sitemaps import MAX_SITEMAP_BYTES, SitemapRefused, sitemap_read

pytestmark = pytest.mark.django_db(transaction=True)

URLSET = """<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
{}
</urlset>"""
INDEX = """<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{}</sitemapindex>"""


def url_entry(loc: str, lastmod: str = "", images=()) -> str:
    extra = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    extra += "".join(f"<image:image><image:loc>{image}</image:loc></image:image>" for image in images)
    return f"<url><loc>{loc}</loc>{extra}</url>"


def test_a_sitemap_is_read_whatever_its_form():
    found = sitemap_read(
        URLSET.format(
            url_entry("http://s.example/a.html", "2026-12-01", ["http://cdn.example/a.jpg"])
            + url_entry("HTTP://S.example:80/b/../c.html", "2026-12-01T10:00:00+01:00")
            + url_entry("javascript:alert(1)")
        ).encode()
    )
    assert found.kind == "urlset" and found.invalid == 1
    assert [url for url, _ in found.pages] == ["http://s.example/a.html", "http://s.example/c.html"]
    assert found.pages[0][1].isoformat() == "2026-12-01T00:00:00+00:00"
    assert found.images == [("http://cdn.example/a.jpg", "http://s.example/a.html")]
    gzipped = sitemap_read(
        gzip.compress(INDEX.format("<sitemap><loc>http://s.example/s1.xml</loc></sitemap>").encode())
    )
    assert (gzipped.kind, gzipped.sitemaps) == ("sitemapindex", ["http://s.example/s1.xml"])
    text = sitemap_read(b"\xef\xbb\xbfhttp://s.example/x.html\n\nnot a url\nhttp://s.example/y.html\n")
    assert (text.kind, [u for u, _ in text.pages], text.invalid) == (
        "text",
        ["http://s.example/x.html", "http://s.example/y.html"],
        1,
    )


@pytest.mark.parametrize(
    "body,reason",
    [
        (gzip.compress(b"<urlset>" + b" " * (MAX_SITEMAP_BYTES + 10)), "a gzip bomb"),
        (
            b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
            b"<urlset><url><loc>&lol2;</loc></url></urlset>",
            "DTDForbidden",
        ),
        (b"<html><body>not a sitemap</body></html>", "its root is <html>"),
        (b"\x1f\x8b\x08\x00garbage", "corrupt"),
        (b"<urlset><url><loc>http://s.example/</loc>", "ParseError"),
    ],
)
def test_a_hostile_sitemap_is_refused_with_its_reason(body, reason):
    with pytest.raises(SitemapRefused, match=reason):
        sitemap_read(body)


def drain(pool_runtime, *pools):
    runtimes = [pool_runtime(pool) for pool in pools]
    while any([runtime.wake().claimed for runtime in runtimes]):
        pass


def test_pages_and_images_only_a_sitemap_lists_are_found(settings, pool_runtime):
    with HostileWeb() as site:
        pages_sitemap = URLSET.format(
            url_entry(site.url("/only-in-sitemap.html"), images=[site.url("/img/sitemap-only.jpg")])
            + url_entry("http://elsewhere.example/out-of-scope.html")
        )
        site.pages.update(
            {
                "/robots.txt": Page(
                    body=f"User-agent: *\nDisallow: /private/\nSitemap: {site.url('/sitemap_index.xml')}\n".encode(),
                    content_type="text/plain",
                ),
                "/": Page(body=b"<h1>nothing linked</h1>"),
                "/sitemap_index.xml": Page(
                    body=INDEX.format(
                        f"<sitemap><loc>{site.url('/sitemap-pages.xml.gz')}</loc></sitemap>"
                        f"<sitemap><loc>{site.url('/sitemap_index.xml')}</loc></sitemap>"
                        f"<sitemap><loc>{site.url('/bomb.xml.gz')}</loc></sitemap>"
                        "<sitemap><loc>http://elsewhere.example/sitemap.xml</loc></sitemap>"
                    ).encode(),
                    content_type="application/xml",
                ),
                "/sitemap-pages.xml.gz": Page(
                    body=gzip.compress(pages_sitemap.encode()), content_type="application/gzip"
                ),
                "/bomb.xml.gz": Page(
                    body=gzip.compress(b" " * (MAX_SITEMAP_BYTES * 2)), content_type="application/gzip"
                ),
                "/only-in-sitemap.html": Page(body=b"<p>found by its sitemap</p>"),
            }
        )
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [site.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        source = source_upsert(name="Sitemapped", base_url=site.url("/"), max_depth=1)
        crawl_start(actor="test", sources=[source], run="first")
        drain(pool_runtime, "crawl")

        jobs = {(j.type, j.payload["url"].removeprefix(site.url(""))): j for j in Job.objects.exclude(type="analysis")}
        index = jobs[("sitemap", "/sitemap_index.xml")]
        assert index.state == State.DONE
        read = StepEvent.objects.get(job=index, step="read").data
        assert (read["kind"], read["sitemaps_listed"], read["sitemaps_followed"]) == ("sitemapindex", 4, 2)
        assert {r["reason"] for r in read["refusals"]} == {
            "lists itself (or a sitemap that led to it)",
            "outside the source's scope",
        }
        bomb = jobs[("sitemap", "/bomb.xml.gz")]
        assert bomb.state == State.DEAD and "a gzip bomb" in bomb.error_message
        pages = jobs[("sitemap", "/sitemap-pages.xml.gz")]
        assert pages.state == State.DONE and pages.payload["chain"] == [site.url("/sitemap_index.xml")]
        listed = StepEvent.objects.get(job=pages, step="read").data
        assert (listed["pages_listed"], listed["pages_in_scope"], listed["images_listed"]) == (2, 1, 1)
        only = jobs[("crawl", "/only-in-sitemap.html")]
        assert only.state == State.DONE and only.parent_id == pages.id
        image = Candidate.objects.get(image_url=site.url("/img/sitemap-only.jpg"))
        assert (image.found_in, image.page_url) == ("sitemap image:loc", site.url("/only-in-sitemap.html"))
        assert Job.objects.filter(type="analysis", payload__candidate_id=image.id, parent=pages).exists()
        assert not site.asked("/out-of-scope.html")
        # What the source's console page says of its last run.
        source = Source.objects.get(pk=source.pk)
        read = sitemaps_read(source, source.last_run_id)
        assert (read.sitemaps, read.pages_listed, read.pages_in_scope, read.images_listed) == (3, 2, 1, 1)
        assert (read.pages_reached, read.refused) == (1, 1)

        # The next run: a page whose lastmod is not after its last fetch is not asked for again.
        PageState.objects.filter(url=site.url("/only-in-sitemap.html")).update(fetched_at="2026-01-02T00:00:00Z")
        site.pages["/sitemap-pages.xml.gz"] = Page(
            body=gzip.compress(URLSET.format(url_entry(site.url("/only-in-sitemap.html"), "2026-01-01")).encode()),
            content_type="application/gzip",
        )
        crawl_start(actor="test", sources=[source], run="second")
        drain(pool_runtime, "crawl")
        second = Job.objects.get(type="sitemap", payload__run="second", payload__url=site.url("/sitemap-pages.xml.gz"))
        assert StepEvent.objects.get(job=second, step="read").data["pages_unchanged"] == 1
        assert not Job.objects.filter(
            type="crawl", payload__run="second", payload__url=site.url("/only-in-sitemap.html")
        )


def test_a_source_may_ask_for_sitemap_xml_or_for_no_sitemaps(settings, pool_runtime):
    with HostileWeb() as site:
        site.pages["/"] = Page(body=b"<p>home</p>")
        site.pages["/sitemap.xml"] = Page(
            body=URLSET.format(url_entry(site.url("/listed.html"))).encode(), content_type="text/xml"
        )
        site.pages["/listed.html"] = Page(body=b"<p>listed</p>")
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [site.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        plain = source_upsert(name="Plain", base_url=site.url("/"), max_depth=1)
        crawl_start(actor="test", sources=[plain], run="robots-only")
        drain(pool_runtime, "crawl")
        assert not Job.objects.filter(type="sitemap").exists()  # robots.txt names none
        Source.objects.filter(pk=plain.pk).update(sitemaps=Source.Sitemaps.ROBOTS_OR_DEFAULT)
        crawl_start(actor="test", sources=[Source.objects.get(pk=plain.pk)], run="default")
        drain(pool_runtime, "crawl")
        assert Job.objects.get(type="sitemap").state == State.DONE
        assert Job.objects.get(type="crawl", payload__run="default", payload__url=site.url("/listed.html")).state == (
            State.DONE
        )


def test_a_source_names_one_of_the_sitemap_choices():
    with pytest.raises(JobInputError, match="sitemaps"):
        source_upsert(name="Odd", base_url="https://odd.example/", sitemaps="all of them")
    assert not Source.objects.exists()


@pytest.mark.parametrize("params", ["utm_* w", "a=b", "*x", "ok,,", "x\ny"])
def test_a_sources_dropped_parameters_are_names(params):
    with pytest.raises(JobInputError, match="query_params_ignored"):
        source_upsert(name="Params", base_url="https://params.example/", query_params_ignored=params)
    assert source_upsert(
        name="Params", base_url="https://params.example/", query_params_ignored="utm_*, w"
    ).ignored_params == (
        "utm_*",
        "w",
    )
