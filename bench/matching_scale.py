"""What one candidate's comparison costs as the protected originals grow to 10,000, and whether the
copies are still found: analysis@2's index against a loop over every original.

Run: .venv/bin/python -m bench.matching_scale [--originals 10000] [--sizes 100,1000,3000,10000]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set).

- **Originals**: the 19 photographs of ``bench/matching.py``'s evaluation set, then fillers up to
  each size: synthetic pictures (the demo's artwork generator — a gradient and a dozen shapes — at
  480×320, with grain and a random crop), distinct from the photographs and from each other. They are
  registered with their fingerprints (computed as an upload does, on both cores) and stored with a
  small JPEG each.
- **Candidates**: each photograph mirrored, cropped 20 %, rotated 10° and recompressed (JPEG 30): 76.
  *Found* = matched with its own original.
- **Measured at each size**, per candidate: the whole comparison on the database's index
  (``analysis.compare``: hash bands, keypoint votes, the keypoint check of the shortlist) and the
  index's queries alone. **Baselines** in the same run: the loop over every original that analysis@1
  made (read each dHash, compare) and what checking every original's keypoints would cost (one check,
  measured, × the originals).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from PIL import Image, ImageFilter, ImageOps  # noqa: E402

from bench.matching import _crop, _jpeg, _rotate, load_photos  # noqa: E402
from bench.throughput import start  # noqa: F401  (sets Django up, the embedded PostgreSQL too)
from workers.pipeline import analysis, demoweb, images, matching  # noqa: E402
from workers.pipeline.asset_index import DatabaseIndex, fingerprint_fields  # noqa: E402
from workers.pipeline.models import AssetHashBand, AssetKeypointKey, ProtectedAsset  # noqa: E402
from workers.pipeline.services import asset_register  # noqa: E402

CANDIDATES = (
    ("mirror", ImageOps.mirror),
    ("crop 20 %", lambda im: _crop(im, 0.20)),
    ("rotate 10°", lambda im: _rotate(im, 10)),
    ("JPEG 30", lambda im: _jpeg(im, 30)),
)


def filler(seed: int) -> tuple[bytes, matching.Fingerprint]:
    """A synthetic original: the demo's artwork with grain, randomly cropped; its JPEG and fingerprint."""
    rnd = random.Random(seed)
    picture = demoweb.artwork(100_000 + seed, (560, 380)).filter(ImageFilter.GaussianBlur(rnd.uniform(0, 1.5)))
    grain = Image.effect_noise(picture.size, rnd.uniform(8, 30)).convert("RGB")
    picture = Image.blend(picture, grain, 0.15)
    left, top = rnd.randrange(80), rnd.randrange(60)
    picture = picture.crop((left, top, left + 480, top + 320))
    buffer = io.BytesIO()
    picture.resize((240, 160)).save(buffer, "JPEG", quality=60)
    return buffer.getvalue(), matching.fingerprint(picture)


TABLES = (ProtectedAsset, AssetHashBand, AssetKeypointKey)


def add_fillers(first: int, count: int) -> None:
    with ProcessPoolExecutor(2) as pool:
        made = list(pool.map(filler, range(first, first + count), chunksize=50))
    with transaction.atomic():
        assets = ProtectedAsset.objects.bulk_create(
            [
                ProtectedAsset(
                    name=f"filler {first + i}",
                    owner_ref="bench",
                    image=data,
                    content_hash=hashlib.sha256(data).hexdigest(),
                    dhash=f"{images.dhash(Image.open(io.BytesIO(data))):016x}",
                    width=240,
                    height=160,
                    **fingerprint_fields(print_),
                )
                for i, (data, print_) in enumerate(made)
            ],
            batch_size=500,
        )
        with connection.cursor() as cursor:
            for model, column, values in ((AssetHashBand, "band", "bands"), (AssetKeypointKey, "key", "keypoint_keys")):
                with cursor.copy(f"COPY {model._meta.db_table} ({column}, asset_id) FROM STDIN") as copy:
                    for asset, (_, print_) in zip(assets, made):
                        for value in getattr(print_, values)():
                            copy.write_row((value, asset.pk))
    with connection.cursor() as cursor:  # as autovacuum would: statistics, and a visibility map for index-only scans
        for model in TABLES:
            cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")


class TimedIndex(DatabaseIndex):
    """The database's index, each query's time summed by query."""

    seconds: dict[str, float] = {}

    def _timed(self, name, method, *args):
        started = time.perf_counter()
        try:
            return method(*args)
        finally:
            TimedIndex.seconds[name] = TimedIndex.seconds.get(name, 0.0) + time.perf_counter() - started

    def empty(self):
        return self._timed("empty", super().empty)

    def near_hashes(self, cand, limit):
        return self._timed("near_hashes", super().near_hashes, cand, limit)

    def keypoint_votes(self, keys, limit):
        return self._timed("keypoint_votes", super().keypoint_votes, keys, limit)

    def originals(self, ids):
        return self._timed("originals", super().originals, ids)


def explain(cases) -> None:
    """EXPLAIN ANALYZE of the two look-ups for one candidate (crop 20 %: both run)."""
    cand = matching.candidate(cases[1][2].pixels)
    index = DatabaseIndex()
    for name, args in (
        ("near_hashes", (cand, matching.SHORTLIST)),
        ("keypoint_votes", (cand.keys(), matching.SHORTLIST)),
    ):
        captured = []

        def capture(execute, sql, params, many, context, captured=captured):
            captured.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            getattr(index, name)(*args)
        sql, params = captured[-1]
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            print(f"\n{name}:\n" + "\n".join("  " + row[0] for row in cursor.fetchall()))


def measure(cases, ids) -> dict:
    bands = settings.LEITSTAND_ANALYSIS
    whole, queries, loop, found = [], [], [], 0
    by_query = {}
    for name, _label, decoded in cases:
        TimedIndex.seconds = {}
        started = time.perf_counter()
        result = analysis.compare(decoded, bands, index=TimedIndex())
        whole.append(time.perf_counter() - started)
        queries.append(sum(TimedIndex.seconds.values()))
        for query, seconds in TimedIndex.seconds.items():
            by_query.setdefault(query, []).append(seconds)
        found += analysis.verdict_for(result.score, bands) == "match" and result.asset_id == ids[name]
        started = time.perf_counter()
        analysis.compare(decoded, bands, method="dhash")
        loop.append(time.perf_counter() - started)
    return {
        "whole_ms": 1000 * statistics.median(whole),
        "queries_ms": 1000 * statistics.median(queries),
        "loop_ms": 1000 * statistics.median(loop),
        "found": found,
        "by_query": {query: 1000 * statistics.median(times) for query, times in by_query.items()},
    }


def keypoint_check_ms(cases) -> float:
    """One keypoint check (a candidate's features against one original's), median of a sample."""
    sample = list(ProtectedAsset.objects.order_by("id").values_list("id", flat=True)[:20])
    originals = DatabaseIndex().originals(sample)
    times = []
    for _, _, decoded in cases[:12]:
        cand = matching.candidate(decoded.pixels)
        _ = (cand.features, cand.mirror_features)  # computed once, as in the analysis
        for original in originals:
            started = time.perf_counter()
            matching._verify(cand, original)
            times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,3000,10000")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the look-ups at the largest size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    photos = load_photos()
    ids = {}
    for name, photo in photos.items():
        buffer = io.BytesIO()
        photo.save(buffer, "PNG")
        ids[name] = asset_register(name=name, owner_ref="bench", data=buffer.getvalue())[0].pk
    cases = []
    for name, photo in photos.items():
        for label, transform in CANDIDATES:
            buffer = io.BytesIO()
            transform(photo).save(buffer, "JPEG", quality=90)
            cases.append((name, label, images.decode(buffer.getvalue())))
    check_ms = keypoint_check_ms(cases)
    print(f"{len(cases)} candidates; one keypoint check of one original: {check_ms:.2f} ms (median)")
    print(
        f"\n{'originals':>9} {'compare ms':>11} {'index queries ms':>17} {'analysis@1 loop ms':>19} {'check all keypoints ms':>23} {'found':>7}"
    )
    rows = []
    have = ProtectedAsset.objects.count()
    for size in sizes:
        if size > have:
            began = time.perf_counter()
            add_fillers(have, size - have)
            print(f"          (added {size - have} fillers in {time.perf_counter() - began:.0f} s)")
            have = size
        row = measure(cases, ids)
        rows.append((size, row))
        print(
            f"{size:>9} {row['whole_ms']:>11.1f} {row['queries_ms']:>17.1f} {row['loop_ms']:>19.1f} "
            f"{check_ms * size:>23.0f} {row['found']:>4}/{len(cases)}   "
            + ", ".join(f"{query} {ms:.1f}" for query, ms in row["by_query"].items())
        )
    if args.explain:
        explain(cases)
    (small, first), (large, last) = rows[0], rows[-1]
    growth = large / small
    print(
        f"\n{small} → {large} originals ({growth:g}×): the comparison costs {last['whole_ms'] / first['whole_ms']:.2f}×, "
        f"its index queries {last['queries_ms'] / first['queries_ms']:.2f}×; analysis@1's loop {last['loop_ms'] / first['loop_ms']:.2f}×"
    )


if __name__ == "__main__":
    main()
