"""The crawl and analysis handlers in this process's pool runtime, against the real demo web and a
hostile local server: outcomes, steps, children, findings, robots, status codes, deferral."""

import uuid

import pytest

from jobs.models import Job, State, StepEvent, Transition
from tests.support.hostile_server import HostileServer
from workers.pipeline import demoweb
from workers.pipeline.crawl import page_key, parse
from workers.pipeline.extraction import extract
from workers.pipeline.models import Candidate, Finding
from workers.pipeline.politeness import PolitenessPolicy, host_acquire
from workers.pipeline.services import asset_register, crawl_start, source_upsert
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(settings):
    with demoweb.DemoWeb(slow_seconds=0.2) as web:
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = web.targets
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        web.source_rows = [source_upsert(**source) for source in web.sources()]
        yield web


def crawl_job(web, path, *, site=0, depth=0, run=None):
    source = web.source_rows[site]
    run = run or uuid.uuid4().hex[:8]
    url = web.base_url(site) + path.lstrip("/")
    return job_submit(
        job_type="crawl",
        payload={"source_id": source.id, "url": url, "depth": depth, "run": run},
        idempotency_key=page_key(run, url),
        actor="test",
        correlation_id=f"test:{run}",
        source=source.name,
    ).job


def reload(job):
    return Job.objects.get(pk=job.pk)


def steps(job):
    return list(StepEvent.objects.filter(job=job).order_by("id").values_list("step", "outcome"))


def test_a_gallery_page_yields_candidates_and_one_analysis_child_per_image(web, pool_runtime):
    job = crawl_job(web, "/werke/1.html", depth=1)
    assert pool_runtime("crawl").wake().completed == 1
    job = reload(job)
    assert job.state == State.DONE
    assert job.completion_reason == "page crawled: 3 images handed to analysis, 0 links followed"
    assert job.result_ref == f"page:{web.base_url(0)}werke/1.html" and len(job.result_checksum) == 64
    assert steps(job) == [("robots", "ok"), ("fetch", "ok"), ("extract", "ok"), ("candidates", "ok"), ("spawn", "ok")]
    assert list(Transition.objects.filter(job=job).order_by("id").values_list("to_state", flat=True))[-2:] == [
        "result_stored",
        "done",
    ]
    children = Job.objects.filter(parent=job)
    assert {c.type for c in children} == {"analysis"} and children.count() == 3
    assert {c.correlation_id for c in children} == {job.correlation_id}
    assert {c.source for c in children} == {"Galerie Nord"} and {c.priority for c in children} == {4}
    urls = set(Candidate.objects.values_list("image_url", flat=True))
    assert urls == {web.base_url(0) + p for p in ("img/abendlicht.png", "img/mohnfeld-klein.jpg", "img/logo.png")}


def test_links_are_followed_in_scope_to_the_source_depth_once_per_run(web, pool_runtime):
    root = crawl_job(web, "/", run="r1")
    pool_runtime("crawl").wake()
    crawls = Job.objects.filter(parent=root, type="crawl")
    # The off-site link is out of scope; /private/ is followed, and robots.txt decides there.
    assert sorted(c.payload["url"].removeprefix(web.base_url(0)) for c in crawls) == [
        "private/intern.html",
        "werke/1.html",
        "werke/2.html",
    ]
    pool_runtime("crawl").wake()
    grandchildren = Job.objects.filter(parent__in=crawls, type="crawl")
    assert not grandchildren.exists(), "depth 2 is the limit and /werke/1.html was already crawled in this run"
    again = crawl_start(actor="test", sources=[web.source_rows[0]], run="r1")
    assert not again[0].created, "a run is idempotent"


def test_robots_disallow_ends_the_job_as_skipped_without_fetching_the_page(web, pool_runtime):
    job = crawl_job(web, "/private/intern.html", depth=1)
    pool_runtime("crawl").wake()
    job = reload(job)
    assert job.state == State.DONE
    assert job.completion_reason.startswith("skipped: disallowed by robots.txt of http://")
    assert steps(job) == [("robots", "skipped")]
    assert "/private/intern.html" not in [path for _, path in web.sites[0].requests]


def test_a_missing_page_is_permanent_and_a_503_is_retried_after_its_retry_after(web, pool_runtime, db_clock):
    missing = crawl_job(web, "/archiv/fehlt.html", site=1, depth=1)
    flaky = crawl_job(web, "/archiv/wackelig.html", site=1, depth=1)
    pool_runtime("crawl").wake()
    missing, flaky = reload(missing), reload(flaky)
    assert (missing.state, missing.error_class) == (State.DEAD, "workers.pipeline.fetching.PageGone")
    assert "answered 404" in missing.error_message
    assert (flaky.state, flaky.error_class) == (State.FAILED, "workers.pipeline.fetching.SiteUnavailable")
    assert 0.9 < (flaky.next_attempt_at - flaky.state_changed_at).total_seconds() < 1.1, "Retry-After: 1"
    for _ in range(2):
        db_clock.advance(1.5)
        from jobs import leases

        leases.retries_promote_due()
        pool_runtime("crawl").wake()
    flaky = reload(flaky)
    assert flaky.state == State.DONE and flaky.attempts == 3, "503 twice, then 200"


def test_robots_txt_is_asked_through_the_hosts_slot_and_its_delay(web, pool_runtime, settings):
    """robots.txt is a request to the host like any other: the page after it waits one delay, start
    to start, as the site sees the requests arrive."""
    settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.4}
    job = crawl_job(web, "/werke/1.html", depth=1)
    assert pool_runtime("crawl").wake().completed == 1
    assert reload(job).state == State.DONE
    (robots_at, _), (page_at, page) = web.sites[0].requests[:2]
    assert page == "/werke/1.html" and page_at - robots_at >= 0.4, f"{page_at - robots_at:.3f} s apart"


def test_a_busy_host_defers_the_job_without_using_its_retry_budget(web, pool_runtime):
    host_acquire(web.targets[0], PolitenessPolicy())  # another worker's request is in flight
    job = crawl_job(web, "/werke/1.html")
    pool_runtime("crawl").wake()
    job = reload(job)
    assert (job.state, job.attempts) == (State.PLANNED, 0)
    assert job.due_at > job.state_changed_at
    cause = Transition.objects.filter(job=job).order_by("id").last().cause
    assert cause.startswith(f"released: deferred: {web.targets[0]}: a request to this host is in flight; turn booked")
    # robots.txt is a request to the host like any other: it waits for the host's slot too.
    assert steps(job) == [("robots", "deferred")], "politeness, not a failure"


@pytest.mark.parametrize(
    "path,verdict,state",
    [
        ("img/abendlicht.png", "match", State.RECHECK_DUE),
        ("img/mohnfeld-klein.jpg", "match", State.RECHECK_DUE),
        ("img/kreise-collage.jpg", "unclear", State.UNCLEAR),
        ("img/logo.png", "no_match", State.DONE),
    ],
)
def test_analysis_bands_the_best_score(web, pool_runtime, path, verdict, state):
    crawl_job(web, "/werke/1.html" if "collage" not in path else "/werke/2.html", depth=1)
    pool_runtime("crawl").wake()
    candidate = Candidate.objects.get(image_url=web.base_url(0) + path)
    analysis = Job.objects.get(type="analysis", payload__candidate_id=candidate.id)
    runtime = pool_runtime("analysis")
    while runtime.wake().claimed:
        pass
    analysis = reload(analysis)
    finding = Finding.objects.get(candidate=candidate)
    assert (analysis.state, finding.verdict, finding.job_id) == (state, verdict, analysis.id)
    assert analysis.result_ref == f"finding:{finding.id}" or state == State.UNCLEAR
    assert steps(analysis) == [("robots", "ok"), ("fetch", "ok"), ("decode", "ok"), ("compare", "ok"), ("record", "ok")]
    evidence = finding.evidence
    assert evidence["bands"]["match_at"] == 0.9 and evidence["stage"] in ("hash", "keypoints")
    if evidence["stage"] == "hash":  # the distance between the hashes the index holds
        assert evidence["asset_pdq"] in finding.asset.pdq_hashes and evidence["differing_bits"] <= 256
    else:
        assert evidence["inliers"] <= evidence["matches"] and len(evidence.get("pairs", [])) <= 40
    candidate.refresh_from_db()
    assert len(candidate.content_hash) == 64 and candidate.analysed_at is not None
    if state == State.UNCLEAR:
        assert f"finding:{finding.id}" in analysis.error_message and "a person decides" in analysis.error_message
    if state == State.DONE:
        assert analysis.completion_reason.startswith("no match: best score 0.6")


def test_hostile_pages_and_images_end_with_clear_errors_and_nothing_lost(settings, pool_runtime):
    with HostileServer() as server:
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [server.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        source = source_upsert(name="Hostile", base_url=server.url("/"), max_depth=0)
        job = job_submit(
            job_type="crawl",
            payload={"source_id": source.id, "url": server.url("/hostile-page"), "depth": 0, "run": "h"},
            idempotency_key="h",
            actor="test",
        ).job
        pool_runtime("crawl").wake()
        assert reload(job).state == State.DONE
        urls = set(Candidate.objects.values_list("image_url", flat=True))
        assert urls == {"http://169.254.169.254/latest/meta-data/x.png", server.url("/png"), server.url("/fake-png")}
        runtime = pool_runtime("analysis")
        while runtime.wake().claimed:
            pass
        outcomes = {j.payload["candidate_id"]: j for j in Job.objects.filter(type="analysis")}
        by_url = {c.image_url: outcomes[c.id] for c in Candidate.objects.all()}
        assert (
            by_url["http://169.254.169.254/latest/meta-data/x.png"].error_class
            == "workers.pipeline.http.AddressRefused"
        )
        assert by_url[server.url("/png")].error_class == "workers.pipeline.images.ImageRefused"
        assert by_url[server.url("/fake-png")].error_class == "workers.pipeline.http.ResponseRefused"
        assert {j.state for j in by_url.values()} == {State.DEAD}
        assert not [p for p in server.requests if "meta-data" in p]


def test_extract_cleans_and_bounds_what_a_page_says():
    found = extract(
        b"<base href='/sub/'><img src='a.png#frag'><img src='a.png'><a href='b.html'>\x00"
        b"<a href='javascript:x()'><a href='http://[::1'><source srcset='c.webp 1x, d.webp 2x'>",
        base_url="http://site.example/page.html",
    )
    # One source element shows one image: its largest size is the candidate, the other a variant.
    assert found.image_urls == ["http://site.example/sub/a.png", "http://site.example/sub/d.webp"]
    assert found.images[1].variants == ["http://site.example/sub/c.webp"]
    assert found.links == ["http://site.example/sub/b.html"]
    assert found.ignored == {"javascript:": 1, "unparsable": 1}


@pytest.mark.parametrize(
    "payload,message",
    [
        ({"source_id": "1", "url": "http://a/", "depth": 0, "run": "r"}, "source_id"),
        ({"source_id": 1, "url": "ftp://a/", "depth": 0, "run": "r"}, "payload.url"),
        ({"source_id": 1, "url": "http://a/", "depth": -1, "run": "r"}, "payload.depth"),
        ({"source_id": 1, "url": "http://a/", "depth": 0, "run": ""}, "payload.run"),
        ({"source_id": 1, "url": "http://a/", "depth": 0, "run": "r", "x": 1}, "unknown crawl payload fields: x"),
    ],
)
def test_a_bad_crawl_payload_is_a_permanent_error_naming_the_field(payload, message):
    from jobs.errors import PermanentError

    with pytest.raises(PermanentError, match=message):
        parse(payload)


def run_all(pool_runtime, pool):
    runtime = pool_runtime(pool)
    while runtime.wake().claimed:
        pass


def test_a_second_crawl_of_an_unchanged_page_costs_no_download_and_no_analysis(web, pool_runtime):
    first = crawl_job(web, "/werke/1.html", run="r1")
    run_all(pool_runtime, "crawl")
    run_all(pool_runtime, "analysis")
    assert Job.objects.filter(type="analysis").count() == 3 and Finding.objects.count() == 3
    before = len(web.sites[0].requests)

    second = crawl_job(web, "/werke/1.html", run="r2")
    run_all(pool_runtime, "crawl")
    assert reload(second).state == State.DONE
    assert reload(second).completion_reason.startswith("page unchanged since its last fetch (304): nothing to analyse")
    assert steps(second) == [("robots", "ok"), ("fetch", "unchanged"), ("spawn", "ok")]
    assert reload(second).result_checksum == reload(first).result_checksum
    assert Job.objects.filter(type="analysis").count() == 3, "a 304 page costs no analysis job"
    assert [path for _, path in web.sites[0].requests[before:]] == ["/werke/1.html"]


def test_an_unchanged_image_is_not_analysed_again_and_points_to_its_finding(web, pool_runtime):
    crawl_job(web, "/werke/1.html", run="r1")
    run_all(pool_runtime, "crawl")
    run_all(pool_runtime, "analysis")
    copy = Candidate.objects.get(image_url=web.base_url(0) + "img/abendlicht.png")
    finding = Finding.objects.get(candidate=copy)
    assert copy.etag and finding.content_hash == copy.content_hash

    # Asked again (a page that changed hands its images to analysis again): the image answers 304.
    again = job_submit(job_type="analysis", payload={"candidate_id": copy.pk}, idempotency_key="again", actor="t").job
    run_all(pool_runtime, "analysis")
    assert steps(again) == [("robots", "ok"), ("fetch", "unchanged")]
    assert (reload(again).state, reload(again).result_ref) == (State.DONE, f"finding:{finding.pk}")
    assert (
        reload(again).completion_reason
        == f"unchanged since its last analysis (304): finding {finding.pk} (match) stands"
    )

    # A site that ignores conditional requests sends the same bytes again: not analysed again either.
    Candidate.objects.filter(pk=copy.pk).update(etag="", last_modified="")
    known = job_submit(job_type="analysis", payload={"candidate_id": copy.pk}, idempotency_key="full", actor="t").job
    run_all(pool_runtime, "analysis")
    assert steps(known) == [("robots", "ok"), ("fetch", "ok"), ("known", "ok")]
    assert reload(known).result_ref == f"finding:{finding.pk}" and Finding.objects.count() == 3
    assert Candidate.objects.get(pk=copy.pk).etag, "its version is recorded for the next conditional request"

    # The same bytes under another URL are another copy: analysed, with a finding of their own.
    twin = Candidate.objects.create(image_url=copy.image_url + "?mirror=1", page_url="p", source_id=copy.source_id)
    job_submit(job_type="analysis", payload={"candidate_id": twin.pk}, idempotency_key="twin", actor="t")
    run_all(pool_runtime, "analysis")
    assert Finding.objects.get(candidate=twin).content_hash == finding.content_hash


def test_a_new_processing_version_analyses_again_and_keeps_the_first_finding(web, pool_runtime, monkeypatch, settings):
    from workers.pipeline import analysis

    crawl_job(web, "/werke/2.html", run="r1")
    run_all(pool_runtime, "crawl")
    run_all(pool_runtime, "analysis")
    collage = Candidate.objects.get(image_url=web.base_url(0) + "img/kreise-collage.jpg")
    first = Job.objects.get(type="analysis", payload__candidate_id=collage.id)

    monkeypatch.setitem(analysis.VERSIONS, "analysis@2-next", analysis.VERSIONS["analysis@2"])
    settings.LEITSTAND_ANALYSIS_VERSION = "analysis@2-next"
    second = job_submit(job_type="analysis", payload={"candidate_id": collage.pk}, idempotency_key="v2", actor="t").job
    run_all(pool_runtime, "analysis")
    assert [step for step, _ in steps(second)] == ["robots", "fetch", "decode", "compare", "record"]
    findings = [Finding.objects.get(job=job) for job in (first, second)]
    assert [f.analysis_version for f in findings] == ["analysis@2", "analysis@2-next"]
    assert findings[0].pk != findings[1].pk, "each analysis job keeps the finding it made (its review case's evidence)"
    assert all(f.candidate_id == collage.id and f.verdict == "unclear" for f in findings)


def test_a_cancelled_crawl_attempt_writes_no_candidates_and_spawns_nothing(web):
    from jobs import leases
    from jobs.models import StaleWrite
    from jobs.services import job_cancel
    from workers.pipeline.crawl import handle
    from workers.runtime.context import JobContext
    from workers.runtime.pool import _spawn, _spawn_many

    job = crawl_job(web, "/werke/1.html", depth=1)
    worker = leases.WorkerIdentity("zombie-host", 4242, "crawl")
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=60, start=True)
    job_cancel(job_id=job.id, actor="operator", reason="stop this run")  # the attempt is stale from here
    context = JobContext(
        job_id=claimed.id,
        job_type="crawl",
        correlation_id=claimed.correlation_id,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        lease_version=claimed.lease_version,
        payload=claimed.payload,
        priority=claimed.priority,
        _spawn=_spawn,
        _spawn_many=_spawn_many,
    )
    with pytest.raises(leases.StaleAttempt):
        handle(context)
    assert not Candidate.objects.exists() and not Job.objects.filter(parent=job).exists()
    assert StaleWrite.objects.filter(job_id=job.id, operation="effect").exists()
