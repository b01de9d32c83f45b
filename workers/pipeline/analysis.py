"""The analysis handler (pool ``analysis``): is this candidate a copy of a protected asset?

The image is downloaded through the safe client (robots.txt and politeness apply), decoded safely
(``workers.pipeline.images``) and compared with the protected originals near it
(``workers.pipeline.matching``: a dihedral PDQ hash of the image and of its content without frame or
caption bar, then keypoints with a verified homography; the originals come from the database's index,
``workers.pipeline.asset_index``). The deciding stage's score falls into one of three bands
(``LEITSTAND_ANALYSIS``):

- ``score ≥ match_at`` — a match: a finding and a recheck plan are recorded and the job ends
  ``recheck_due`` (executed; the plan's rechecks decide the business outcome);
- ``score < no_match_below`` — no match: the finding is recorded and the job ends ``done``;
- in between — unclear: the finding (with the deciding stage's evidence: hash distance and variant,
  or keypoint inliers and their pairs) is recorded and the job goes to review.

Recording the finding is an effect applied at most once per job: a re-run after a lost status
report gets the first run's finding, never a second one.

What this version analysed is not analysed again: a candidate with a finding of this processing
version is fetched with that answer's ETag / Last-Modified, and a ``304`` — or the same bytes —
ends the job ``done`` pointing to that finding (``docs/crawler.md``, "Conditional requests").

Payload: ``{"candidate_id": int}``.
"""

from __future__ import annotations

import hashlib

from jobs.errors import PermanentError, TransientError
from jobs.models import Job, LeitstandNow
from workers.pipeline import images, matching, options
from workers.pipeline.asset_index import DatabaseIndex
from workers.pipeline.fetching import Fetched, fetch_politely
from workers.pipeline.http import IMAGE_TYPES, Validators
from workers.pipeline.models import Candidate, Finding, ProtectedAsset
from workers.runtime.context import Done, JobContext, NeedsReview, Skipped, Stored
from workers.runtime.hooks import match_report

PROCESSING_VERSION = "analysis@2"  # PDQ + keypoints (workers.pipeline.matching): the default
DHASH_VERSION = "analysis@1"  # one dHash against every original: what analysis@2 replaced
TIGHT_VERSION, TIGHT_BANDS = "analysis@2-tight", {"match_at": 0.95, "no_match_below": 0.85}
# The versions this handler can run: the pools run ``LEITSTAND_ANALYSIS_VERSION``; the others are its
# shadow versions (``replay --shadow``, ``LEITSTAND_SHADOW_SAMPLES``). ``bands`` None: the settings'.
VERSIONS = {
    PROCESSING_VERSION: {"method": "robust", "bands": None},
    DHASH_VERSION: {"method": "dhash", "bands": None},
    TIGHT_VERSION: {"method": "robust", "bands": TIGHT_BANDS},  # fewer automatic matches, more review
}


def running_version() -> str:
    return options.current().analysis_version


def version_spec(version: str) -> tuple[str, dict]:
    """A version's comparison method and score bands."""
    return VERSIONS[version]["method"], VERSIONS[version]["bands"] or dict(options.current().bands)


def subject(payload: dict) -> str:
    """An analysis job is about the image it compares: its candidate's URL."""
    candidate_id = payload.get("candidate_id")
    if isinstance(candidate_id, bool) or not isinstance(candidate_id, int):
        return ""
    return Candidate.objects.filter(pk=candidate_id).values_list("image_url", flat=True).first() or ""


def parse(payload: dict) -> int:
    if set(payload) != {"candidate_id"}:
        raise PermanentError('the analysis payload is exactly {"candidate_id": <int>}')
    candidate_id = payload["candidate_id"]
    if isinstance(candidate_id, bool) or not isinstance(candidate_id, int) or candidate_id < 1:
        raise PermanentError("payload.candidate_id must be a positive integer")
    return candidate_id


def verdict_for(score: float, bands: dict | None = None) -> str:
    bands = bands or options.current().bands
    if score >= bands["match_at"]:
        return Finding.Verdict.MATCH
    if score < bands["no_match_below"]:
        return Finding.Verdict.NO_MATCH
    return Finding.Verdict.UNCLEAR


def compare(
    decoded: images.DecodedImage, bands: dict, *, method: str = "robust", index: matching.AssetIndex | None = None
) -> matching.Comparison | None:
    """The comparison of a decoded candidate with the protected originals: analysis@2's stages
    (``workers.pipeline.matching``) on the database's index — or on ``index`` (``manage.py
    match_image`` gives one original) — or analysis@1's one dHash against every original
    (``method="dhash"``, kept for shadow runs). None when no original is registered."""
    if method == "dhash":
        return _compare_dhash(decoded)
    index = index or DatabaseIndex()
    if index.outdated():  # a no-match now would stand (conditional requests): wait for the fingerprints
        raise TransientError(
            f"protected originals lack the {matching.FINGERPRINT_VERSION} fingerprint: "
            "run manage.py fingerprint_assets (the analysis retries)"
        )
    return matching.compare(matching.candidate(decoded.pixels), index, match_at=bands["match_at"])


def score_against(decoded: images.DecodedImage, asset: ProtectedAsset) -> float:
    """The score of a decoded image against one original by the running version's comparison: a
    recheck asks whether the copy analysis found is still there (a mirrored copy is compared as a
    mirror, a crop by its keypoints)."""
    method, bands = version_spec(running_version())
    if method == "dhash":
        return images.similarity(decoded.dhash, int(asset.dhash, 16))
    comparison = compare(decoded, bands, index=DatabaseIndex(only=[asset.pk]))
    if comparison is None:  # the original could not be fingerprinted: its page says why
        raise PermanentError(
            f"protected asset {asset.pk} cannot be compared: {asset.fingerprint_error or 'no fingerprint'}"
        )
    return comparison.score


def _compare_dhash(decoded: images.DecodedImage) -> matching.Comparison | None:
    assets = list(ProtectedAsset.objects.values_list("id", "name", "dhash"))
    if not assets:
        return None
    score, asset_id, asset_name, asset_hash = max(
        (images.similarity(decoded.dhash, int(dhash, 16)), pk, name, dhash) for pk, name, dhash in assets
    )
    evidence = {"stage": "dhash", "asset_dhash": asset_hash, "differing_bits": round((1 - score) * 64), "hash_bits": 64}
    return matching.Comparison(asset_id, asset_name, score, "dhash", evidence)


def handle(context: JobContext, *, version: str | None = None, shadow: bool = False):
    """``version``: one of ``VERSIONS`` (default: the running one); ``shadow``: a shadow run of it.
    The steps: the candidate, its image fetched (conditionally when this version has a finding of it),
    content it has seen ends as it was; else decoded, compared, the finding recorded, the outcome."""
    version = version or running_version()
    method, bands = version_spec(version)
    candidate = _candidate(context.payload)
    # A version's own run (not a shadow's) asks whether the image changed since the finding it
    # already has from this version, and skips content this version has analysed.
    earlier = None if shadow else _finding_of(candidate, version)
    validators = Validators(candidate.etag, candidate.last_modified) if earlier is not None else None
    fetched = fetch_politely(context, candidate.image_url, accept=IMAGE_TYPES, validators=validators)
    if fetched.result is None:
        return Skipped(fetched.robots.reason)
    if fetched.unchanged:
        return _stands(earlier, "304", candidate.content_hash)
    body = fetched.result.body
    content_hash = hashlib.sha256(body).hexdigest()
    # The same bytes as this candidate's finding of this version (a site that ignores conditional
    # requests, or changed its ETag only): not analysed again. Another URL's copy is a copy of its own,
    # with its own finding and recheck plan.
    if earlier is not None and earlier.content_hash == content_hash:
        _known(context, candidate, earlier, content_hash, fetched)
        return _stands(earlier, "same content", content_hash)
    # The same bytes analysed under another URL by this version: not decoded and compared again.
    same = None if shadow else _same_bytes(candidate, version, content_hash)
    if same is not None:
        return _same_as(context, version, candidate, same, content_hash, fetched, bands)
    decoded = _decode(context, body)
    comparison = _compare(context, decoded, bands, method)
    if comparison is None:
        return Skipped("no protected assets are registered to compare with")
    # A shadow run (isolated, rolled back) writes over the running version's finding of the job, so
    # the comparison of the two runs compares the same finding's outcome.
    recorded = _record(
        context, running_version() if shadow else version, candidate, comparison, decoded, bands, content_hash, fetched
    )
    return _outcome(comparison, recorded, bands, content_hash)


def _candidate(payload: dict) -> Candidate:
    candidate_id = parse(payload)
    candidate = Candidate.objects.filter(pk=candidate_id).first()
    if candidate is None:
        raise PermanentError(f"candidate {candidate_id} does not exist")
    return candidate


def _finding_of(candidate: Candidate, version: str) -> Finding | None:
    """This version's latest finding of the candidate, if any."""
    return Finding.objects.filter(candidate=candidate, analysis_version=version).order_by("-id").first()


def _same_bytes(candidate: Candidate, version: str, content_hash: str) -> Finding | None:
    """This version's latest finding of the same bytes under another URL, if any."""
    return (
        Finding.objects.filter(content_hash=content_hash, analysis_version=version)
        .exclude(candidate=candidate)
        .select_related("candidate", "asset")
        .order_by("-id")
        .first()
    )


def _same_as(context: JobContext, version, candidate: Candidate, same: Finding, content_hash, fetched, bands):
    """An image whose bytes this version analysed under another URL. No match or a case for review:
    the candidate points at that finding (one analysis, one review for the same bytes). A match: this
    URL is a copy of its own, followed up on its own — its finding is the earlier comparison's,
    recorded for it, and its recheck asks its own URL."""
    with context.step("same bytes") as info:
        info.update(finding_id=same.pk, verdict=same.verdict, image_url=same.candidate.image_url[:500])
        if same.verdict != Finding.Verdict.MATCH:
            dhash = same.evidence.get("candidate_dhash", "")
            context.effect(
                f"same-bytes:{context.job_id}",
                lambda: _candidate_update(candidate, content_hash, dhash, fetched, same_as=same),
                kind="same bytes",
            )
            return Done(
                reason=f"the same bytes as {same.candidate.image_url[:200]}: its finding {same.pk} ({same.verdict}) "
                "stands for this image",
                result_ref=f"finding:{same.pk}",
                result_checksum=content_hash,
            )
    evidence = {**same.evidence, "image_url": candidate.image_url, "page_url": candidate.page_url}
    evidence["same_bytes_as"] = {"finding_id": same.pk, "image_url": same.candidate.image_url}
    comparison = matching.Comparison(
        same.asset_id, same.asset.name if same.asset else "", same.score, same.evidence.get("stage", ""), evidence
    )
    recorded = _record_once(
        context,
        version,
        candidate,
        asset_id=same.asset_id,
        score=same.score,
        verdict=same.verdict,
        evidence=evidence,
        content_hash=content_hash,
        dhash=same.evidence.get("candidate_dhash", ""),
        thumbnail=same.thumbnail,
        fetched=fetched,
        same_bytes_as=same.pk,
    )
    return _outcome(comparison, recorded, bands, content_hash)


def _stands(earlier: Finding, why: str, content_hash: str) -> Done:
    return Done(
        reason=f"unchanged since its last analysis ({why}): finding {earlier.pk} ({earlier.verdict}) stands",
        result_ref=f"finding:{earlier.pk}",
        result_checksum=content_hash,
    )


def _known(context: JobContext, candidate: Candidate, earlier: Finding, content_hash: str, fetched: Fetched) -> None:
    """Content this version analysed: only the candidate's validators and hashes are brought up to date."""
    with context.step("known") as info:
        dhash = earlier.evidence.get("candidate_dhash", "")
        context.effect(
            f"known:{context.job_id}",
            lambda: _candidate_update(candidate, content_hash, dhash, fetched),
            kind="known",
        )
        info.update(finding_id=earlier.pk, verdict=earlier.verdict)


def _decode(context: JobContext, body: bytes):
    with context.step("decode") as info:
        decoded = images.decode(body)
        info.update(format=decoded.format, width=decoded.width, height=decoded.height, dhash=f"{decoded.dhash:016x}")
    return decoded


def _compare(context: JobContext, decoded, bands, method):
    """The closest original and its score, or None when there are no originals to compare with."""
    # The originals' state and the shortlisted originals are read once per batch of jobs.
    index = context.shared.setdefault("originals", DatabaseIndex())
    with context.step("compare") as info:
        comparison = compare(decoded, bands, method=method, index=index)
        if comparison is None:
            info["skipped"] = True
            return None
        verdict = verdict_for(comparison.score, bands)
        info.update(
            asset_id=comparison.asset_id, score=round(comparison.score, 4), verdict=verdict, stage=comparison.stage
        )
    return comparison


def _record(context: JobContext, version: str, candidate, comparison, decoded, bands, content_hash, fetched) -> dict:
    """The finding, once per job (an effect), with the evidence a person reviews."""
    evidence = {
        **comparison.evidence,
        "candidate_dhash": f"{decoded.dhash:016x}",
        "bands": dict(bands),
        "image_url": candidate.image_url,
        "page_url": candidate.page_url,
        "format": decoded.format,
        "size": [decoded.width, decoded.height],
    }
    return _record_once(
        context,
        version,
        candidate,
        asset_id=comparison.asset_id,
        score=comparison.score,
        verdict=verdict_for(comparison.score, bands),
        evidence=evidence,
        content_hash=content_hash,
        dhash=f"{decoded.dhash:016x}",
        thumbnail=decoded.thumbnail,
        fetched=fetched,
    )


def _record_once(context: JobContext, version: str, candidate, *, fetched, **finding) -> dict:
    """The ``record`` step: the finding written once per job (an effect); ``finding``: its fields
    (``asset_id``, ``score``, ``verdict``, ``evidence``, ``content_hash``, ``dhash``, ``thumbnail``)
    and, for the same bytes analysed under another URL, ``same_bytes_as`` (that finding's ID)."""
    same_bytes_as = finding.pop("same_bytes_as", None)
    with context.step("record") as info:
        recorded = context.effect(
            f"finding:{context.job_id}",
            kind="finding",
            apply=lambda: _finding_record(context, version, candidate, fetched=fetched, **finding),
        )
        info.update(finding_id=recorded["finding_id"], verdict=recorded["verdict"])
        if same_bytes_as is not None:
            info["same_bytes_as"] = same_bytes_as
    return recorded


def _outcome(comparison, recorded: dict, bands, content_hash: str):
    """A match is stored for its recheck; no match is done; between the bands a person decides."""
    finding_ref = f"finding:{recorded['finding_id']}"
    score, verdict = recorded["score"], recorded["verdict"]
    asset_id, asset_name = comparison.asset_id, comparison.asset_name
    if verdict == Finding.Verdict.MATCH:
        return Stored(result_ref=finding_ref, result_checksum=content_hash, recheck=True)
    if verdict == Finding.Verdict.NO_MATCH:
        closest = f"against {asset_name!r} ({comparison.stage})" if asset_id else "(no original lies near it)"
        return Done(
            reason=f"no match: best score {score:.2f} {closest} is below {bands['no_match_below']:.2f}",
            result_ref=finding_ref,
            result_checksum=content_hash,
        )
    return NeedsReview(
        f"score {score:.2f} against {asset_name!r} ({comparison.stage}) lies between {bands['no_match_below']:.2f} "
        f"and {bands['match_at']:.2f}: a person decides ({finding_ref})"
    )


def _candidate_update(
    candidate: Candidate, content_hash: str, dhash: str, fetched: Fetched, *, same_as: Finding | None = None
) -> None:
    """The candidate as analysed now: its content, its version for the next conditional request, and
    the finding of the same bytes under another URL that stands for it (None: its own analysis)."""
    validators = fetched.validators
    Candidate.objects.filter(pk=candidate.pk).update(
        content_hash=content_hash,
        dhash=dhash,
        etag=validators.etag,
        last_modified=validators.last_modified,
        analysed_at=LeitstandNow(),
        same_as=same_as,
    )


def _finding_record(
    context: JobContext,
    version: str,
    candidate: Candidate,
    asset_id: int,
    score: float,
    verdict: str,
    evidence: dict,
    content_hash: str,
    dhash: str,
    thumbnail: bytes,
    fetched: Fetched,
) -> dict:
    """The effect ``finding:<job>``, inside the ledger's transaction. Once per job — but a replay's
    isolated run applies it again over the recorded one, so it is an upsert: one statement, without
    the look-up and savepoints of ``update_or_create``."""
    (finding,) = Finding.objects.bulk_create(
        [
            Finding(
                candidate=candidate,
                asset_id=asset_id,
                analysis_version=version,
                job_id=context.job_id,
                score=score,
                verdict=verdict,
                evidence=evidence,
                content_hash=content_hash,
                thumbnail=thumbnail,
            )
        ],
        update_conflicts=True,
        unique_fields=["candidate", "asset", "analysis_version", "job"],
        update_fields=["score", "verdict", "evidence", "content_hash", "thumbnail"],
    )
    _candidate_update(candidate, content_hash, dhash, fetched)
    followed_up = []
    if verdict == Finding.Verdict.MATCH:  # whoever follows a match up (rechecks) does so in this transaction
        followed_up = match_report(
            sender="analysis", job=Job.objects.get(pk=context.job_id), finding=finding, content_hash=content_hash
        )
    return {"finding_id": finding.pk, "verdict": verdict, "score": score, "followed_up": followed_up}
