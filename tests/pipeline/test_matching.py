"""The comparison of analysis@2 (``workers.pipeline.matching``) on natural photographs, its database
index, the analysis handler on copies people post, and ``manage.py match_image``.

The photographs are scikit-image's (the benchmark's evaluation set, ``bench/matching.py``)."""

import io
import json
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from PIL import Image, ImageOps

from bench.matching import TRANSFORMATIONS, _caption, _crop, _frame, _rotate, load_photos
from jobs.errors import TransientError
from jobs.models import Job, State
from jobs.services import JobInputError
from tests.support.scripted_server import ScriptedServer
from workers.pipeline import analysis, images, matching
from workers.pipeline.asset_index import DatabaseIndex
from workers.pipeline.models import AssetHashBand, AssetKeypointKey, Candidate, Finding, ProtectedAsset
from workers.pipeline.services import asset_register, source_upsert
from workers.runtime.services import job_submit

BANDS = {"match_at": 0.9, "no_match_below": 0.75}
SOME = ("astronaut", "chelsea", "coffee", "rocket", "camera", "coins")


@pytest.fixture(scope="module")
def photos():
    return {name: image for name, image in load_photos().items() if name in SOME}


@pytest.fixture(scope="module")
def index(photos):
    return matching.MemoryIndex({i: (name, matching.fingerprint(photos[name])) for i, name in enumerate(SOME, 1)})


def verdict(comparison):
    return analysis.verdict_for(comparison.score, BANDS)


def png(image: Image.Image, fmt="PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "transform,stage",
    [
        (lambda im: im.resize((im.width // 2, im.height // 2)), "hash"),
        (ImageOps.mirror, "hash"),
        (lambda im: _frame(im, 0.10), "hash"),
        (lambda im: _crop(im, 0.20), "keypoints"),
        (lambda im: _rotate(im, 10), "keypoints"),
    ],
    ids=["resize", "mirror", "frame", "crop", "rotate"],
)
def test_each_kind_of_copy_is_found_by_the_stage_meant_for_it(photos, index, transform, stage):
    stages = []
    for number, name in enumerate(SOME, 1):
        result = matching.compare(matching.candidate(transform(photos[name])), index)
        assert (verdict(result), result.asset_id) == ("match", number), name
        stages.append(result.stage)
        if result.stage == "keypoints":
            assert result.evidence["inliers"] >= matching.KEYPOINT_MATCH_INLIERS
            pairs = result.evidence["pairs"]
            assert 4 <= len(pairs) <= 40 and all(-0.01 <= v <= 1.01 for pair in pairs for v in pair)
    # The hash decides most resizes, mirrors and frames (the keypoints catch the rest); only the
    # keypoints can decide crops and rotations.
    assert stages.count(stage) >= (len(SOME) - 1 if stage == "hash" else len(SOME)), stages


def test_a_mirror_and_a_frame_are_named_in_the_hash_evidence(photos, index):
    mirrored = matching.compare(matching.candidate(ImageOps.mirror(photos["chelsea"])), index)
    assert mirrored.evidence["variant"] == "mirrored" and mirrored.evidence["differing_bits"] <= 31
    framed = matching.compare(matching.candidate(_frame(photos["chelsea"], 0.10)), index)
    assert framed.evidence["variant"] == "as is (its content, frame or bar trimmed)"
    left, top, right, bottom = framed.evidence["trimmed"]
    assert left > 0 and top > 0, "the frame was trimmed"


def test_distinct_photographs_neither_match_nor_go_to_review(photos):
    prints = {name: matching.fingerprint(image) for name, image in photos.items()}
    for a in SOME:
        candidate = matching.candidate(photos[a])
        for b in SOME:
            if a != b:
                result = matching.compare(candidate, matching.MemoryIndex({1: (b, prints[b])}))
                assert verdict(result) == "no_match", (a, b, result.evidence)


def test_trimming_takes_frames_and_caption_bars_and_leaves_photographs_whole(photos):
    chelsea = photos["chelsea"]
    border = int(max(chelsea.size) * 0.05)
    _, box = matching.trim(_frame(chelsea, 0.05))
    assert all(
        abs(got - want) <= 1
        for got, want in zip(box, (border, border, border + chelsea.width, border + chelsea.height))
    )
    _, box = matching.trim(_caption(chelsea))
    assert box[:3] == (0, 0, chelsea.width) and abs(box[3] - int(chelsea.height * 0.85)) <= 1
    assert matching.trim(photos["astronaut"])[1] == (0, 0, *photos["astronaut"].size)


def test_a_flat_image_never_matches_by_its_hash_alone():
    white = Image.new("RGB", (300, 200), "white")
    result = matching.compare(
        matching.candidate(white), matching.MemoryIndex({1: ("white", matching.fingerprint(white))})
    )
    assert result.evidence["quality"] < matching.PDQ_MIN_QUALITY and verdict(result) == "unclear"


@pytest.mark.parametrize("size", [(1, 1), (1, 4000), (4000, 1), (3, 300), (40, 40)])
def test_tiny_and_extreme_images_are_compared_without_error(index, size):
    image = Image.effect_noise(size, 64).convert("RGB")
    print_ = matching.fingerprint(image)
    assert len(print_.hashes) in (1, 2) and len(print_.points) == len(print_.descriptors)
    if min(size) < 10:  # a sliver: no room for keypoints, and its stored blob says so
        assert print_.keypoints_blob() == b"" and matching.Fingerprint.keypoints_from_blob(b"")[0].shape == (0, 2)
    assert verdict(matching.compare(matching.candidate(image), index)) != "match"


def test_the_evaluation_sets_transformations_are_the_ones_the_goals_name():
    assert [name for name, _, _ in TRANSFORMATIONS] == [
        "resize 50 %",
        "JPEG quality 30",
        "grayscale",
        "brightness +20 %",
        "caption bar 15 %",
        "crop 10 %",
        "crop 20 %",
        "mirror",
        "rotate 5°",
        "rotate 10°",
        "frame 5 %",
        "frame 10 %",
    ]


# The database's index and the handler.


@pytest.fixture
def registered(db, photos):
    return {name: asset_register(name=name, owner_ref=f"RH-{name}", data=png(photos[name]))[0] for name in SOME}


def test_the_database_index_answers_as_the_memory_index_does(photos, index, registered):
    ids = {asset.pk: name for name, asset in registered.items()}
    for transform in (ImageOps.mirror, lambda im: _crop(im, 0.2), lambda im: _caption(im)):
        for name in SOME:
            candidate = matching.candidate(transform(photos[name]))
            in_db = matching.compare(candidate, DatabaseIndex())
            in_memory = matching.compare(candidate, index)
            assert ids[in_db.asset_id] == in_memory.asset_name == name
            assert (in_db.stage, round(in_db.score, 6)) == (in_memory.stage, round(in_memory.score, 6))


def test_an_index_shared_by_a_batch_reads_its_state_and_each_original_once(photos, registered):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    shared = DatabaseIndex()  # as a batch of analysis jobs shares it (JobContext.shared)
    candidates = [matching.candidate(ImageOps.mirror(photos[name])) for name in SOME]
    with CaptureQueriesContext(connection) as first:
        answers = [matching.compare(candidate, shared).asset_name for candidate in candidates]
    with CaptureQueriesContext(connection) as again:
        assert [matching.compare(candidate, shared).asset_name for candidate in candidates] == answers
    originals = "keypoints" in " ".join(q["sql"] for q in first)
    assert originals and "keypoints" not in " ".join(q["sql"] for q in again), "each original read once"
    state = [q["sql"] for q in first if 'AS "a" FROM "workers_protectedasset"' in q["sql"]]  # ``exists()``
    assert state and not any('AS "a" FROM "workers_protectedasset"' in q["sql"] for q in again), "state read once"
    assert len(again) < len(first)


def test_an_original_stores_its_fingerprint_at_upload(registered):
    asset = registered["coffee"]
    assert asset.fingerprint_version == matching.FINGERPRINT_VERSION and len(asset.pdq_hashes[0]) == 64
    assert (
        AssetHashBand.objects.filter(asset=asset).count() in (16, 32)
        and asset.fingerprint["size"][0] == matching.WORK_SIDE
    )
    keys = AssetKeypointKey.objects.filter(asset=asset).count()
    assert 100 < keys <= matching.KEYPOINT_KEYS
    points, descriptors = matching.Fingerprint.keypoints_from_blob(bytes(asset.keypoints))
    assert points.shape[1] == 2 and descriptors.shape[1] == 32 and len(points) == len(descriptors)


def test_outdated_originals_are_fingerprinted_again_by_the_command(registered, photos):
    ProtectedAsset.objects.filter(pk=registered["rocket"].pk).update(fingerprint_version="", pdq_hashes=[])
    AssetKeypointKey.objects.filter(asset=registered["rocket"]).delete()
    AssetHashBand.objects.filter(asset=registered["rocket"]).delete()
    rocket = matching.candidate(ImageOps.mirror(photos["rocket"]))
    assert matching.compare(rocket, DatabaseIndex()).asset_name != "rocket", "an outdated original is not compared"
    # So the analysis waits instead of recording a no-match that would stand (conditional requests).
    decoded = images.decode(png(ImageOps.mirror(photos["rocket"])))
    with pytest.raises(TransientError, match="run manage.py fingerprint_assets"):
        analysis.compare(decoded, BANDS)
    out = io.StringIO()
    call_command("fingerprint_assets", stdout=out)
    assert out.getvalue().strip() == f"1 original(s) fingerprinted ({matching.FINGERPRINT_VERSION})"
    assert AssetKeypointKey.objects.filter(asset=registered["rocket"]).exists()
    assert analysis.compare(decoded, BANDS).asset_name == "rocket"


def test_an_original_that_cannot_be_decoded_is_marked_and_the_others_are_fingerprinted(registered, settings):
    ProtectedAsset.objects.update(fingerprint_version="")
    settings.LEITSTAND_IMAGE_MAX_PIXELS = 250_000  # lowered after the originals were registered
    too_big = sorted(a.pk for a in registered.values() if a.width * a.height > 250_000)
    big = ProtectedAsset.objects.get(pk=too_big[0])
    out = io.StringIO()
    call_command("fingerprint_assets", stdout=out)
    lines = out.getvalue().splitlines()
    assert 0 < len(too_big) < len(SOME) and lines[0].startswith(f"{len(SOME) - len(too_big)} original(s) fingerprinted")
    assert [int(line.split()[1]) for line in lines[1:]] == too_big
    assert f"original {big.pk} not fingerprinted (not compared): not decoded: {big.width}×{big.height} is" in lines[1]
    big.refresh_from_db()
    assert big.fingerprint_error.startswith("not decoded:") and big.fingerprint_version == ""
    assert not DatabaseIndex().outdated(), "a marked original does not hold the analysis up"
    call_command("fingerprint_assets", stdout=out)  # not tried again without --retry-failed
    assert out.getvalue().splitlines()[-1] == f"0 original(s) fingerprinted ({matching.FINGERPRINT_VERSION})"
    settings.LEITSTAND_IMAGE_MAX_PIXELS = 25_000_000
    call_command("fingerprint_assets", "--retry-failed", stdout=out)
    big.refresh_from_db()
    assert (big.fingerprint_version, big.fingerprint_error) == (matching.FINGERPRINT_VERSION, "")


def test_transparency_is_seen_on_white_and_16_bit_grey_is_not_clipped(photos):
    logo = Image.new("RGBA", (300, 200), (0, 0, 0, 0))
    logo.paste(photos["coffee"].resize((200, 140)), (50, 30))
    on_white = Image.new("RGB", logo.size, "white")
    on_white.paste(logo, mask=logo)
    original = images.decode(png(logo)).pixels
    assert original.getpixel((5, 5)) == (255, 255, 255), "transparent pixels are white, not the colour under them"
    index = matching.MemoryIndex({1: ("logo", matching.fingerprint(original))})
    repost = images.decode(png(on_white, "JPEG")).pixels
    assert verdict(matching.compare(matching.candidate(repost), index)) == "match"
    hidden = on_white.convert("RGBA")
    hidden.putalpha(0)  # the original's pixels under alpha 0: an image nobody can see
    assert verdict(matching.compare(matching.candidate(images.decode(png(hidden)).pixels), index)) != "match"

    import numpy as np

    gradient = np.tile(np.linspace(0, 65535, 256, dtype=np.uint16), (64, 1))
    deep = Image.fromarray(gradient)  # mode I;16, as a 16-bit grey PNG opens
    pixels = images.decode(png(deep)).pixels
    assert pixels.mode == "RGB" and pixels.getpixel((0, 0))[0] == 0 and 120 < pixels.getpixel((128, 0))[0] < 135


def test_threads_fingerprinting_side_by_side_get_what_one_thread_gets(photos):
    """The web server's threads fingerprint uploads at once: OpenCV's objects are one per thread."""
    from concurrent.futures import ThreadPoolExecutor

    pictures = [photos[name] for name in SOME] * 3
    alone = [matching.fingerprint(p).keypoints_blob() for p in pictures]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: matching.fingerprint(p).keypoints_blob(), pictures))
    assert together == alone


def match_image(*args) -> list[dict]:
    out = io.StringIO()
    call_command("match_image", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_match_image_says_why_each_file_did_or_did_not_match(tmp_path, photos, registered):
    files = {
        "mirror.jpg": ImageOps.mirror(photos["chelsea"]),
        "crop.png": _crop(photos["chelsea"], 0.2),
        "other.png": photos["coffee"],
    }
    for file, image in files.items():
        image.save(tmp_path / file)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    paths = [str(tmp_path / f) for f in (*files, "broken.png", "missing.png")]
    lines = match_image("--asset", str(registered["chelsea"].pk), *paths)
    assert [(line.get("verdict"), line.get("stage")) for line in lines[:3]] == [
        ("match", "hash"),
        ("match", "keypoints"),
        ("no_match", lines[2]["stage"]),
    ]
    assert lines[0]["evidence"]["variant"] == "mirrored" and lines[1]["evidence"]["inliers"] >= 20
    assert "not one of the accepted formats" in lines[3]["error"] and lines[4]["error"].endswith("no such file")
    # Against every registered original, as the analysis compares: the coffee finds its own.
    (other,) = match_image(str(tmp_path / "other.png"))
    assert (other["verdict"], other["asset_id"]) == ("match", registered["coffee"].pk)
    # An original given as a file is fingerprinted as an upload would be.
    photos["chelsea"].save(tmp_path / "original.png")
    (by_file,) = match_image("--asset", str(tmp_path / "original.png"), str(tmp_path / "crop.png"))
    assert (by_file["verdict"], by_file["score"]) == ("match", lines[1]["score"])
    with pytest.raises(CommandError, match="no protected asset has this id"):
        match_image("--asset", "999999", paths[0])


@pytest.mark.django_db(transaction=True)
def test_the_handler_finds_a_mirrored_a_cropped_and_a_framed_copy_and_match_image_agrees(
    settings, pool_runtime, photos, tmp_path
):
    for name in SOME:
        asset_register(name=name, owner_ref=f"RH-{name}", data=png(photos[name]))
    copies = {
        "/mirror.jpg": ImageOps.mirror(photos["astronaut"]),
        "/crop.jpg": _crop(photos["rocket"], 0.2),
        "/frame.jpg": _frame(photos["coffee"], 0.1),
        "/other.jpg": Image.effect_noise((300, 200), 80).convert("RGB"),
    }
    bodies = {path: png(image.convert("RGB"), "JPEG") for path, image in copies.items()}
    with ScriptedServer({path: [(200, "image/jpeg", body)] for path, body in bodies.items()}) as server:
        settings.LEITSTAND_HTTP_ALLOWED_TARGETS = [server.target]
        settings.LEITSTAND_POLITENESS = {**settings.LEITSTAND_POLITENESS, "min_delay_seconds": 0.0}
        source = source_upsert(name="Reposts", base_url=server.url("/"), max_depth=0)
        jobs = {}
        for path in bodies:
            candidate = Candidate.objects.create(image_url=server.url(path), page_url=server.url("/"), source=source)
            jobs[path] = job_submit(
                job_type="analysis", payload={"candidate_id": candidate.pk}, idempotency_key=uuid.uuid4().hex, actor="t"
            ).job
        runtime = pool_runtime("analysis")
        while runtime.wake().claimed:
            pass
    findings = {path: Finding.objects.get(job=job) for path, job in jobs.items()}
    got = {path: (f.verdict, f.asset.name if f.asset else None, f.evidence["stage"]) for path, f in findings.items()}
    assert got["/mirror.jpg"] == ("match", "astronaut", "hash")
    assert got["/crop.jpg"] == ("match", "rocket", "keypoints")
    assert got["/frame.jpg"] == ("match", "coffee", "hash")
    assert got["/other.jpg"][0] == "no_match"
    assert Job.objects.get(pk=jobs["/crop.jpg"].pk).state == State.RECHECK_DUE
    assert findings["/mirror.jpg"].analysis_version == analysis.PROCESSING_VERSION == "analysis@2"
    # The operator's question, answered with the same code and bands: the same verdict and score.
    for path, body in bodies.items():
        (tmp_path / path.lstrip("/")).write_bytes(body)
        (line,) = match_image(str(tmp_path / path.lstrip("/")))
        assert (line["verdict"], line["score"]) == (findings[path].verdict, round(findings[path].score, 4)), path


def test_the_old_dhash_version_compares_every_original(registered, photos):
    decoded = images.decode(png(ImageOps.mirror(photos["chelsea"])))
    old = analysis.compare(decoded, BANDS, method="dhash")
    new = analysis.compare(decoded, BANDS)
    assert old.stage == "dhash" and verdict(old) == "no_match", "analysis@1 misses a mirrored copy"
    assert new.stage == "hash" and verdict(new) == "match" and new.asset_name == "chelsea"


def test_reanalyse_submits_the_candidates_only_an_older_version_analysed_once(registered, django_user_model):
    from django.core.exceptions import PermissionDenied

    from jobs.models import Batch
    from workers.pipeline.models import Source
    from workers.pipeline.services import reanalysis_start

    source = Source.objects.create(name="S", base_url="https://s.example/")
    old, new, never = (
        Candidate.objects.create(image_url=f"https://s.example/{n}.png", page_url="https://s.example/", source=source)
        for n in ("old", "new", "never")
    )
    asset = registered["coffee"]
    for candidate, version in ((old, "analysis@1"), (new, "analysis@1"), (new, "analysis@2")):
        Finding.objects.create(
            candidate=candidate, asset=asset, score=0.5, verdict="no_match", analysis_version=version
        )

    out = io.StringIO()
    call_command("reanalyse", "--dry-run", stdout=out)
    assert out.getvalue().strip() == "1 candidate(s) would be analysed again with analysis@2; nothing was submitted"
    assert not Job.objects.filter(type="analysis").exists()
    call_command("reanalyse", stdout=out)
    (job,) = Job.objects.filter(type="analysis")
    assert (
        job.payload == {"candidate_id": old.pk}
        and job.priority >= 7
        and job.idempotency_key == f"reanalysis:analysis@2:{old.pk}"
    )
    assert Batch.objects.get(pk=job.batch_id).key == "reanalysis:analysis@2"
    assert reanalysis_start(actor="t") == (0, None), "a second call finds the candidate taken"
    with pytest.raises(JobInputError, match="limit"):
        reanalysis_start(actor="t", limit=0)
    viewer = django_user_model.objects.create_user("v", password="p")
    with pytest.raises(PermissionDenied):
        reanalysis_start(actor="v", user=viewer)
    assert never.findings.count() == 0 and Job.objects.filter(type="analysis").count() == 1
