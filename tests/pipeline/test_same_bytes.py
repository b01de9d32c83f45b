"""Each image analysed once (issue 53): the same bytes under other URLs are not decoded and compared
again — the candidates point at the one finding; a copy of a protected original found under another
URL is still followed up on its own (its own finding from the same comparison, its own recheck)."""

import io

import numpy as np
import pytest
from PIL import Image

from jobs.models import Job, State, StepEvent
from tests.support.hostile_web import HostileWeb, Page
from workers.pipeline.models import Candidate, Finding
from workers.pipeline.services import asset_register, source_upsert
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)


def steps(job):
    return list(StepEvent.objects.filter(job=job).order_by("id").values_list("step", "outcome"))


def noise_png(seed: int) -> bytes:
    """A picture of its own (flat colours all look alike to a perceptual hash)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).resize((256, 256), Image.Resampling.NEAREST).save(buffer, "PNG")
    return buffer.getvalue()


def test_the_same_image_under_three_urls_is_analysed_once(settings, pool_runtime):
    original, other = noise_png(1), noise_png(2)
    with HostileWeb() as site:
        site.pages["/"] = Page(
            body=b'<img src="/a.png"><img src="/b.png?size=l"><img src="/c/img.png">'
            b'<meta property="og:image" content="/copy-1.png"><img src="/copy-2.png">'
        )
        for path in ("/a.png", "/b.png?size=l", "/c/img.png"):
            site.pages[path] = Page(body=other, content_type="image/png")
        for path in ("/copy-1.png", "/copy-2.png"):
            site.pages[path] = Page(body=original, content_type="image/png")
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [site.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        asset_register(name="red", owner_ref="owner-1", data=original)
        source = source_upsert(name="Same bytes", base_url=site.url("/"), max_depth=0)
        job_submit(
            job_type="crawl",
            payload={"source_id": source.id, "url": site.url("/"), "depth": 0, "run": "same"},
            idempotency_key="same",
            actor="test",
        )
        pool_runtime("crawl").wake()
        runtime = pool_runtime("analysis")
        while runtime.wake().claimed:
            pass

    candidates = {c.image_url.removeprefix(site.url("")): c for c in Candidate.objects.all()}
    analyses = {c: Job.objects.get(type="analysis", payload__candidate_id=c.id) for c in candidates.values()}
    # Three URLs of one image that matches nothing: one finding, three candidates pointing at it.
    three = [candidates[p] for p in ("/a.png", "/b.png?size=l", "/c/img.png")]
    findings = Finding.objects.filter(candidate__in=three)
    assert findings.count() == 1
    (finding,) = findings
    assert finding.verdict == Finding.Verdict.NO_MATCH
    pointing = [c for c in three if c.same_as_id == finding.pk]
    assert len(pointing) == 2 and finding.candidate not in pointing
    for candidate in pointing:
        job = analyses[candidate]
        assert job.state == State.DONE and job.result_ref == f"finding:{finding.pk}"
        assert job.completion_reason.startswith(f"the same bytes as {finding.candidate.image_url}")
        assert ("decode", "ok") not in steps(job) and ("same bytes", "ok") in steps(job)
        assert candidate.content_hash == finding.content_hash
    # Two URLs of the protected original: each a copy followed up on its own, compared once.
    copies = [candidates["/copy-1.png"], candidates["/copy-2.png"]]
    copy_findings = list(Finding.objects.filter(candidate__in=copies).order_by("id"))
    assert [f.verdict for f in copy_findings] == [Finding.Verdict.MATCH] * 2
    first, second = copy_findings
    assert second.evidence["same_bytes_as"] == {"finding_id": first.pk, "image_url": first.candidate.image_url}
    assert second.evidence["image_url"] == second.candidate.image_url and second.score == first.score
    assert {analyses[c].state for c in copies} == {State.RECHECK_DUE}
    assert ("decode", "ok") not in steps(analyses[second.candidate])
