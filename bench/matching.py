"""How well the analysis finds copies people post: natural photographs, transformed, against the
bands — the new comparison (``workers.pipeline.matching``, analysis@2) and the old dHash (analysis@1)
in the same run.

Run: .venv/bin/python -m bench.matching [--details]

The evaluation set is the natural photographs that ship in scikit-image's wheel (``skimage/data``,
scikit-image 0.26.0, a test dependency): ``PHOTOS`` below. Left out: the drawings and synthetic images
(``chessboard_*``, ``color``, ``horse``, ``logo``, ``phantom``) and ``motorcycle_right``, the same scene
as ``motorcycle_left`` from a few centimetres aside (a scene duplicate, not a distinct image).

Each photograph is registered as an original; each transformation of it is a candidate compared with
all originals (a match with another original counts as a false match). Distinct images: every
ordered pair (a candidate against one other original alone). No database: the comparison runs on
``matching.MemoryIndex``, the code the analysis handler runs on its database index.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections import Counter

import django
from PIL import Image, ImageDraw, ImageEnhance, ImageOps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
django.setup()

from workers.pipeline import images, matching  # noqa: E402

PHOTOS = (
    "astronaut.png",
    "brick.png",
    "camera.png",
    "cell.png",
    "chelsea.png",
    "clock_motion.png",
    "coffee.png",
    "coins.png",
    "grass.png",
    "gravel.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "microaneurysms.png",
    "moon.png",
    "motorcycle_left.png",
    "page.png",
    "retina.jpg",
    "rocket.jpg",
    "text.png",
)


def photos_dir() -> str:
    import importlib.util

    spec = importlib.util.find_spec("skimage")
    if spec is None:
        raise SystemExit("scikit-image is needed for the photographs: pip install -e '.[test]'")
    return os.path.join(os.path.dirname(spec.origin), "data")


def load_photos() -> dict[str, Image.Image]:
    folder = photos_dir()
    return {name.split(".")[0]: Image.open(os.path.join(folder, name)).convert("RGB") for name in PHOTOS}


def _jpeg(image: Image.Image, quality: int) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def _crop(image: Image.Image, share: float) -> Image.Image:
    width, height = image.size
    dx, dy = int(width * share / 2), int(height * share / 2)
    return image.crop((dx, dy, width - dx, height - dy))


def _frame(image: Image.Image, share: float) -> Image.Image:
    return ImageOps.expand(image, border=int(max(image.size) * share), fill="white")


def _caption(image: Image.Image) -> Image.Image:
    """A black bar over the bottom 15 % with a line of white text, as memes and reposts add."""
    copy = image.copy()
    width, height = copy.size
    draw = ImageDraw.Draw(copy)
    top = int(height * 0.85)
    draw.rectangle((0, top, width, height), fill="black")
    draw.text((width * 0.05, top + (height - top) * 0.3), "seen on the internet — share!", fill="white")
    return copy


def _rotate(image: Image.Image, degrees: float) -> Image.Image:
    return image.rotate(degrees, resample=Image.Resampling.BILINEAR, fillcolor="white")


# (name, group, transformation): group "easy" must match ≥ 98 %, "hard" ≥ 90 % with ≤ 5 % missed.
TRANSFORMATIONS = (
    ("resize 50 %", "easy", lambda im: im.resize((im.width // 2, im.height // 2), Image.Resampling.BILINEAR)),
    ("JPEG quality 30", "easy", lambda im: _jpeg(im, 30)),
    ("grayscale", "easy", lambda im: im.convert("L").convert("RGB")),
    ("brightness +20 %", "easy", lambda im: ImageEnhance.Brightness(im).enhance(1.2)),
    ("caption bar 15 %", "easy", _caption),
    ("crop 10 %", "hard", lambda im: _crop(im, 0.10)),
    ("crop 20 %", "hard", lambda im: _crop(im, 0.20)),
    ("mirror", "hard", ImageOps.mirror),
    ("rotate 5°", "hard", lambda im: _rotate(im, 5)),
    ("rotate 10°", "hard", lambda im: _rotate(im, 10)),
    ("frame 5 %", "hard", lambda im: _frame(im, 0.05)),
    ("frame 10 %", "hard", lambda im: _frame(im, 0.10)),
)


def verdict(score: float, bands: dict) -> str:
    if score >= bands["match_at"]:
        return "match"
    return "no_match" if score < bands["no_match_below"] else "unclear"


def main() -> None:
    from django.conf import settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--details", action="store_true", help="one line per candidate")
    args = parser.parse_args()
    bands = settings.LEITSTAND_ANALYSIS
    photos = load_photos()
    names = list(photos)
    ids = {name: i for i, name in enumerate(names, 1)}
    started = time.perf_counter()
    prints = {ids[n]: (n, matching.fingerprint(im)) for n, im in photos.items()}
    print(
        f"{len(names)} photographs from {photos_dir()}; fingerprints {1000 * (time.perf_counter() - started) / len(names):.1f} ms each"
    )
    print("per photograph, median ms: " + ", ".join(f"{stage} {ms:.1f}" for stage, ms in stage_times(photos).items()))
    index = matching.MemoryIndex(prints)
    old_hashes = {ids[n]: images.dhash(im) for n, im in photos.items()}

    print(
        f"\n{'transformation':<18} {'new: match':>10} {'unclear':>8} {'missed':>7} {'wrong':>6} │ {'old: match':>10} {'unclear':>8} {'missed':>7}  stages"
    )
    totals = {"easy": Counter(), "hard": Counter()}
    times = []
    for label, group, transform in TRANSFORMATIONS:
        new, old, stages = Counter(), Counter(), Counter()
        for name, photo in photos.items():
            copy = transform(photo)
            began = time.perf_counter()
            result = matching.compare(matching.candidate(copy), index, match_at=bands["match_at"])
            times.append(time.perf_counter() - began)
            outcome = verdict(result.score, bands)
            if outcome == "match" and result.asset_id != ids[name]:
                outcome = "wrong"
            new[outcome] += 1
            stages[result.stage] += 1
            totals[group][outcome] += 1
            candidate_hash = images.dhash(copy)
            old[verdict(max(images.similarity(candidate_hash, h) for h in old_hashes.values()), bands)] += 1
            if args.details:
                print(f"    {label:<18} {name:<20} {outcome:<9} {result.score:.3f} {result.stage:<9} {_brief(result)}")
        print(
            f"{label:<18} {new['match']:>10} {new['unclear']:>8} {new['no_match']:>7} {new['wrong']:>6} │ "
            f"{old['match']:>10} {old['unclear']:>8} {old['no_match']:>7}  {dict(stages)}"
        )

    distinct, old_distinct, worst = Counter(), Counter(), []
    for a in names:
        cand = matching.candidate(photos[a])
        old_hash = images.dhash(photos[a])
        for b in names:
            if a == b:
                continue
            result = matching.compare(cand, matching.MemoryIndex({ids[b]: prints[ids[b]]}), match_at=bands["match_at"])
            distinct[verdict(result.score, bands)] += 1
            worst.append((result.score, a, b, _brief(result)))
            old_distinct[verdict(images.similarity(old_hash, old_hashes[ids[b]]), bands)] += 1
    pairs = sum(distinct.values())
    print(
        f"\ndistinct pairs ({pairs}): new {distinct['match']} false matches, {distinct['unclear']} to review │ "
        f"old {old_distinct['match']} false matches, {old_distinct['unclear']} to review"
    )
    for score, a, b, brief in sorted(worst, reverse=True)[:5]:
        print(f"    closest: {a} vs {b}: {score:.3f} {brief}")
    for group, counts in totals.items():
        n = sum(counts.values())
        print(
            f"{group}: {counts['match'] / n:.1%} match, {counts['no_match'] / n:.1%} missed, {counts['wrong']} wrong ({n} candidates)"
        )
    print(f"comparison per candidate (19 originals): median {1000 * statistics.median(times):.1f} ms")


def stage_times(photos: dict[str, Image.Image]) -> dict[str, float]:
    """What each piece of a candidate's comparison costs (the hash stage: normalise and PDQ in eight
    variants; the keypoint stage: the 512-pixel content and ORB on it and on its mirror)."""
    times: dict[str, list[float]] = {}

    def timed(stage, work):
        started = time.perf_counter()
        result = work()
        times.setdefault(stage, []).append(1000 * (time.perf_counter() - started))
        return result

    for photo in photos.values():
        normalised = timed("normalise (256 px, trim)", lambda photo=photo: matching.normalise(photo))
        timed("PDQ, 8 variants", lambda n=normalised: matching._pdq(n.small, dihedral=True))
        content = timed("content at 512 px", lambda n=normalised: n.content)
        timed("ORB with CLAHE", lambda c=content: matching.orb_features(c))
    return {stage: statistics.median(values) for stage, values in times.items()}


def _brief(result: matching.Comparison) -> str:
    e = result.evidence
    if result.stage == "hash":
        return f"{e.get('differing_bits')} bits ({e.get('variant')})"
    return f"{e['inliers']} inliers of {e['matches']}{' mirrored' if e['mirrored'] else ''}"


if __name__ == "__main__":
    main()
