"""The hostile-web corpus: a local site whose links, headers, robots.txt and images are the attacks of
a site that does not want to be crawled, crawled and analysed by the pool runtime. Each attack ends
with its reason on its own item, and every other item of the page is done (docs/crawler.md, "What a
hostile site can and cannot do")."""

from __future__ import annotations

import uuid

import pytest

from jobs.models import Batch, Job, State, StepEvent, database_now
from tests.support.hostile_web import HostileWeb, Page, jpeg_with_scans, png
from workers.pipeline import options as pipeline_settings
from workers.pipeline.crawl import page_key
from workers.pipeline.models import Candidate, HostState, Source
from workers.pipeline.services import asset_register, source_upsert
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def site(settings):
    with HostileWeb() as web:
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [web.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        asset_register(name="red", owner_ref="owner-1", data=png((200, 30, 30), (128, 128)))
        web.pages["/img/ok.png"] = Page(body=png((20, 160, 40)), content_type="image/png")
        web.source = source_upsert(name="Hostile", base_url=web.url("/"), max_depth=1)
        yield web


def crawl(web: HostileWeb, path: str, pool_runtime, *, depth: int = 0) -> Job:
    """Crawl one page of the site, then analyse what it handed on; the page's job."""
    run = uuid.uuid4().hex[:8]
    url = web.url(path)
    job = job_submit(
        job_type="crawl",
        payload={"source_id": web.source.id, "url": url, "depth": depth, "run": run},
        idempotency_key=page_key(run, url),
        actor="test",
        source=web.source.name,
    ).job
    pool_runtime("crawl").wake()
    pool_runtime("analysis").wake()
    return Job.objects.get(pk=job.pk)


def step_data(job: Job, step: str) -> dict:
    return StepEvent.objects.filter(job=job, step=step).order_by("id").last().data


def children(job: Job, job_type: str) -> list[Job]:
    return list(Job.objects.filter(parent=job, type=job_type).order_by("created_at"))


# --- links and URLs ------------------------------------------------------------------------------


def test_a_long_link_a_huge_image_url_and_a_control_character_never_hide_the_page(site, pool_runtime):
    long_link = "/next?" + "&".join(f"utm_{i}=campaign-{i:04d}" for i in range(14))  # ~260 characters
    assert 229 < len(site.url(long_link)) < 400
    cjk_image = "/img/" + "写" * 1900 + ".png"  # 1,905 characters, 5,705 bytes
    site.pages[long_link] = Page(body=b"<html>the next page</html>")
    site.pages["/"] = Page(
        body=(
            f"<html><a href='{long_link}'>next</a><img src='{cjk_image}'><img src='/img/ok.png'>"
            "<a href='/a\x01b.html'>control</a></html>"
        ).encode()
    )
    page = crawl(site, "/", pool_runtime)
    assert page.state == State.DONE, page.error_message
    assert page.completion_reason == "page crawled: 1 images handed to analysis, 1 links followed"
    extracted = step_data(page, "extract")
    assert extracted["urls_unusable"] == 2
    assert {u["reason"] for u in extracted["unusable"]} == {
        "longer than 2000 bytes",
        "contains a control character or a lone surrogate",
    }
    (analysis,) = children(page, "analysis")
    assert Job.objects.get(pk=analysis.pk).state == State.DONE  # the good image was analysed
    (follow,) = children(page, "crawl")
    assert follow.payload["url"] == site.url(long_link) and len(follow.idempotency_key) < 100
    pool_runtime("crawl").wake()
    assert Job.objects.get(pk=follow.pk).state == State.DONE


def test_a_redirect_to_a_url_no_record_can_hold_is_refused_with_its_reason(site, pool_runtime):
    site.pages["/moved.png"] = Page(302, b"", "text/plain", [("Location", "/img/" + "a" * 2100 + ".png")])
    site.pages["/"] = Page(body=b"<img src='/moved.png'><img src='/img/ok.png'>")
    page = crawl(site, "/", pool_runtime)
    assert page.state == State.DONE
    jobs = {Candidate.objects.get(pk=j.payload["candidate_id"]).image_url: j for j in children(page, "analysis")}
    moved, ok = (Job.objects.get(pk=jobs[site.url(p)].pk) for p in ("/moved.png", "/img/ok.png"))
    assert (moved.state, moved.error_class) == (State.DEAD, "workers.pipeline.http.FetchRefused")
    assert "longer than 2000 bytes" in moved.error_message
    assert ok.state == State.DONE


@pytest.mark.parametrize("charset", ["idna", "undefined", "x-no-such-charset", "utf-7", "punycode", "unicode_escape"])
def test_a_charset_no_text_codec_can_read_is_read_as_utf8(site, pool_runtime, charset):
    site.pages["/"] = Page(body=b"<img src='/img/ok.png'>", content_type=f"text/html; charset={charset}")
    page = crawl(site, "/", pool_runtime)
    assert (page.state, page.completion_reason) == (
        State.DONE,
        "page crawled: 1 images handed to analysis, 0 links followed",
    )


def test_a_page_that_decodes_to_lone_surrogates_is_recorded_and_its_batch_mates_done(site, pool_runtime):
    """Declared as a codec no page uses, the page is read as UTF-8: '+2AA-' stays text. Anything that
    still reaches a record as a lone surrogate is replaced there (tests/runtime/test_isolation.py)."""
    site.pages["/"] = Page(
        body=b"<img src='/x+2AA-.png'><img src='/img/ok.png'>", content_type="text/html; charset=utf-7"
    )
    page = crawl(site, "/", pool_runtime)
    assert page.state == State.DONE
    assert Candidate.objects.filter(image_url=site.url("/x+2AA-.png")).exists()


def test_dot_segments_cannot_walk_past_robots_txt(site, pool_runtime):
    site.pages["/robots.txt"] = Page(body=b"User-agent: *\nDisallow: /private\n", content_type="text/plain")
    site.pages["/private/x.html"] = Page(body=b"<img src='/img/ok.png'>")
    site.pages["/"] = Page(body=b"<a href='/a/../private/x.html'>1</a><a href='/a/%2e%2e/private/x.html'>2</a>")
    page = crawl(site, "/", pool_runtime)
    (follow,) = children(page, "crawl")  # both spell one path: the one the server would receive
    assert follow.payload["url"] == site.url("/private/x.html")
    pool_runtime("crawl").wake()
    follow = Job.objects.get(pk=follow.pk)
    assert follow.completion_reason.startswith("skipped: disallowed by robots.txt")
    assert not site.asked("/private/x.html")


def test_a_redirect_to_a_page_robots_txt_disallows_is_not_followed(site, pool_runtime):
    site.pages["/robots.txt"] = Page(body=b"User-agent: *\nDisallow: /private\n", content_type="text/plain")
    site.pages["/moved.html"] = Page(302, b"", "text/plain", [("Location", "/private/x.html")])
    page = crawl(site, "/moved.html", pool_runtime)
    assert page.state == State.DONE and "disallowed by robots.txt" in page.completion_reason
    assert step_data(page, "fetch")["redirect_disallowed"].endswith(f"disallowed by robots.txt of http://{site.target}")
    assert not site.asked("/private/x.html")


# --- headers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["²", "1e400", "-5", "99999999999999999999999", "Fri, 31 Dec 99999 23:59:59 GMT"])
def test_a_hostile_retry_after_is_a_transient_site_error_not_a_crash(site, pool_runtime, value):
    site.pages["/"] = Page(503, b"busy", "text/plain", [("Retry-After", value)])
    page = crawl(site, "/", pool_runtime)
    assert (page.state, page.error_class) == (State.FAILED, "workers.pipeline.fetching.SiteUnavailable")
    wait = (page.next_attempt_at - page.state_changed_at).total_seconds()
    assert 0 <= wait <= 600, "never more than the Retry-After cap"


# --- robots.txt ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "robots",
    [
        b"\xef\xbb\xbfUser-agent: LeitstandBot\nDisallow: /\n",  # a byte-order mark before the group
        b"User-agent: LeitstandBot\nX-Foo: y\nDisallow: /\n",  # an unknown record inside the group
        b"User-agent: leitstandbot/2.0\r\nDisallow: /\r\n",  # the product token, any case, CRLF
    ],
)
def test_robots_txt_is_obeyed_as_rfc_9309_reads_it(site, pool_runtime, robots):
    site.pages["/robots.txt"] = Page(body=robots, content_type="text/plain")
    site.pages["/"] = Page(body=b"<img src='/img/ok.png'>")
    page = crawl(site, "/", pool_runtime)
    assert page.state == State.DONE and page.completion_reason.startswith("skipped: disallowed by robots.txt")
    assert not site.asked("/")


@pytest.mark.parametrize("status", [500, 503, 429])
def test_an_unreachable_robots_txt_means_try_again_later_not_skipped(site, pool_runtime, status):
    site.pages["/robots.txt"] = Page(status, b"down", "text/plain")
    site.pages["/"] = Page(body=b"<img src='/img/ok.png'>")
    page = crawl(site, "/", pool_runtime)
    assert (page.state, page.error_class) == (State.FAILED, "workers.pipeline.robots.RobotsUnreachable")
    assert not site.asked("/")


@pytest.mark.parametrize("delay", ["999999999", "1e300", "inf", "nan"])
def test_a_huge_crawl_delay_is_capped(site, pool_runtime, delay):
    site.pages["/robots.txt"] = Page(body=f"User-agent: *\nCrawl-delay: {delay}\n".encode(), content_type="text/plain")
    site.pages["/"] = Page(body=b"<html>a page</html>")
    page = crawl(site, "/", pool_runtime)
    assert page.state == State.DONE, page.error_message
    host = HostState.objects.get(host=site.target)
    assert (host.next_allowed_at - database_now()).total_seconds() <= 60, "the cap, not 31 years"


# --- images --------------------------------------------------------------------------------------


def test_a_jpeg_scan_bomb_is_refused_before_decoding_and_the_other_images_are_analysed(site, pool_runtime):
    site.pages["/bomb.jpg"] = Page(body=jpeg_with_scans(5000), content_type="image/jpeg")
    site.pages["/"] = Page(body=b"<img src='/bomb.jpg'><img src='/img/ok.png'>")
    page = crawl(site, "/", pool_runtime)
    analyses = {Candidate.objects.get(pk=j.payload["candidate_id"]).image_url: j for j in children(page, "analysis")}
    bomb = Job.objects.get(pk=analyses[site.url("/bomb.jpg")].pk)
    assert (bomb.state, bomb.error_class) == (State.DEAD, "workers.pipeline.images.ImageRefused")
    assert "scans; the limit is 100" in bomb.error_message and bomb.attempts == 1
    assert Job.objects.get(pk=analyses[site.url("/img/ok.png")].pk).state == State.DONE


# --- sources --------------------------------------------------------------------------------------


def test_a_source_stored_with_a_bad_name_or_base_url_is_recorded_and_the_others_start(site):
    from workers.pipeline.schedule_sweep import ScheduleSweepConfig, run_once

    good = Source.objects.create(name="Good", base_url=site.url("/good"), crawl_every_minutes=1)
    tab = Source.objects.create(name="Tab\there", base_url=site.url("/tab"), crawl_every_minutes=1)
    long_base = Source.objects.create(name="Long", base_url=site.url("/" + "x" * 300), crawl_every_minutes=1)
    Source.objects.filter(pk=site.source.pk).update(is_active=False)
    assert (
        run_once(ScheduleSweepConfig.from_options(pipeline_settings.current())) == 2
    )  # Good and Long (a long base URL is fine now: keys are digests)
    tab.refresh_from_db()
    assert tab.start_error.startswith("run schedule-") and "name: must contain printable characters" in tab.start_error
    assert Job.objects.filter(type="crawl", payload__source_id=good.pk).exists()
    assert Job.objects.filter(type="crawl", payload__source_id=long_base.pk).exists()
    assert not Job.objects.filter(type="crawl", payload__source_id=tab.pk).exists()
    assert run_once(ScheduleSweepConfig.from_options(pipeline_settings.current())) == 0, (
        "the refused source's slot is spent: tried again at its next slot"
    )
    assert not Batch.objects.filter(key__startswith=f"crawl-run:schedule-{tab.pk}-").exists()
