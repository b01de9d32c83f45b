"""Is this image a copy of a protected original? The analysis's comparison, in three stages.

People repost images resized, recompressed, mirrored, cropped, framed, slightly rotated or with a
caption bar. One difference hash finds the first kinds and misses the rest (``docs/crawler.md``,
"How images are compared"). The comparison here:

1. **Normalise**: a uniform frame or a caption bar at an edge is trimmed (``trim``), the image is
   reduced to at most ``WORK_SIDE`` pixels a side. The originals are normalised the same way.
2. **Hash** (Meta's PDQ, the ``pdqhash`` package): a 256-bit DCT hash of the candidate in its eight
   dihedral variants (mirrors, 90° turns) against each original's hash; the closest variant decides.
   Resizes, recompression, colour changes, mirrors and trimmed frames land within ``HASH_MATCH_BITS``.
3. **Keypoints** (ORB in OpenCV, ``opencv-python-headless``): when the hash does not match, the
   candidate's and its mirror's ORB features are matched against the originals' and a homography is
   fitted with RANSAC; the inliers count. Crops, rotations and partial overlays keep hundreds.

Each stage's evidence maps to one score on the scale the bands (``LEITSTAND_ANALYSIS``) are set on:
``HASH_MATCH_BITS`` differing bits and ``KEYPOINT_MATCH_INLIERS`` inliers score exactly
``SCORE_MATCH`` (0.90), ``HASH_UNCLEAR_BITS`` and ``KEYPOINT_UNCLEAR_INLIERS`` score ``SCORE_UNCLEAR``
(0.75); the better stage's score is the comparison's. The calibration is measured on natural
photographs by ``bench/matching.py`` (``docs/performance.md``).

Which originals are compared is an index's answer (``AssetIndex``): the database's
(``workers.pipeline.asset_index``) finds the originals whose hash lies near the candidate's
(multi-index hashing: the 256 bits in 16 bands of 16 bits; two hashes within 31 bits share a band
within one bit) and those sharing the most keypoint keys, without reading every original.
``MemoryIndex`` holds a few fingerprints for ``manage.py match_image`` and the benchmark: the same
stages, the same code.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Protocol

import cv2
import numpy as np
import pdqhash
from PIL import Image, ImageOps

# What the stages compute, and the version of it stored with every original: a change here that
# alters fingerprints bumps it, and originals of another version are fingerprinted again.
FINGERPRINT_VERSION = "pdq-orb@1"
HASH_SIDE = 256  # the longer side of the image the hash and the trimming see
WORK_SIDE = 512  # the longer side of the content the keypoints are found in
TRIM_MAX = 0.30  # at most this share of a side is trimmed
TRIM_TOLERANCE = 24  # a pixel within this (per channel) of the edge's colour belongs to the border
TRIM_SOLID = 0.98  # a frame's line: this share of its pixels of one colour
TRIM_ROW_SHARE = 0.60  # a caption bar's line: its text is thin
HASH_BITS = 256
BANDS, BAND_BITS = 16, 16
HASH_MATCH_BITS, HASH_UNCLEAR_BITS = 31, 70
# PDQ's quality of a candidate below which its hash alone never decides a match: a blank or nearly
# flat image hashes to near-arbitrary bits that meet other flat images' (a reviewer decides).
PDQ_MIN_QUALITY = 20
ORB_FEATURES = 500
ORB_MIN_SIDE = 64
ORB_FAST_THRESHOLD = 10  # OpenCV's default 20 finds no corners in a blurred photograph
KEYPOINT_KEYS = ORB_FEATURES  # this many of the strongest keypoints' descriptors go into the index
# The bits of a descriptor that make its index key: 22 of the 256, drawn once at random (ORB's first
# bits are the most correlated ones; a key of them gathers chance agreements).
KEY_BITS = (6, 19, 24, 42, 44, 75, 86, 87, 89, 112, 152, 156, 164, 173, 179, 194, 200, 203, 215, 224, 247, 254)
KEYPOINT_RATIO = 0.75  # Lowe's ratio test
KEYPOINT_MATCH_INLIERS, KEYPOINT_UNCLEAR_INLIERS = 20, 10
RANSAC_PIXELS = 5.0
SHORTLIST = 5  # originals verified with keypoints, from the keypoint index
SCORE_MATCH, SCORE_UNCLEAR = 0.90, 0.75
# pdqhash's dihedral variants, in its order, as what was done to the candidate to meet the original
# (measured: variant i of an image is the hash of the image transformed so).
VARIANTS = (
    "as is",
    "turned 90° counter-clockwise",
    "turned 180°",
    "turned 90° clockwise",
    "flipped top to bottom",
    "mirrored",
    "transposed",
    "transversed",
)


@dataclass(frozen=True)
class Fingerprint:
    """What the stages need of one image, computed once (an original's at upload)."""

    hashes: tuple[bytes, ...]  # PDQ (32 bytes) of the whole image, and of its trimmed content if trimmed
    quality: int  # PDQ's quality 0-100: below ~50 the image has too little structure for the hash
    size: tuple[int, int]  # the normalised content's width and height (the keypoints' frame)
    trim: tuple[int, int, int, int]  # the content's box in the reduced whole image
    whole: tuple[int, int]  # the reduced whole image's width and height (HASH_SIDE on the longer side)
    points: np.ndarray = field(repr=False)  # (n, 2) float32 keypoint positions in the normalised content
    descriptors: np.ndarray = field(repr=False)  # (n, 32) uint8 ORB descriptors, strongest first

    def bands(self) -> list[int]:
        """The hashes' 16 bands each, tagged with their number: ``band << 16 | bits``."""
        return np.unique(_tagged_bands(self.hashes)).tolist()

    def keypoint_keys(self) -> list[int]:
        return keypoint_keys(self.descriptors[:KEYPOINT_KEYS])

    def keypoints_blob(self) -> bytes:
        """Positions and descriptors packed for storage: per keypoint 2 float32 and 32 bytes."""
        return self.points.astype("<f4").tobytes() + self.descriptors.tobytes()

    @staticmethod
    def keypoints_from_blob(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
        n = len(blob) // 40
        points = np.frombuffer(blob[: n * 8], dtype="<f4").reshape(n, 2)
        descriptors = np.frombuffer(blob[n * 8 : n * 40], dtype=np.uint8).reshape(n, 32)
        return points, descriptors


def _tagged_bands(hashes) -> np.ndarray:
    """(hashes, 16): each hash's 16-bit bands, tagged with their number (``band << 16 | bits``; a
    flip of a low bit keeps the tag)."""
    bands = np.frombuffer(b"".join(hashes), dtype=">u2").astype(np.int64).reshape(-1, BANDS)
    return bands | (np.arange(BANDS, dtype=np.int64) << BAND_BITS)


def keypoint_keys(descriptors: np.ndarray) -> list[int]:
    """The descriptors' index keys: each descriptor's ``KEY_BITS``. A scene point seen again in a copy
    keeps them often enough to vote for its original; 22 bits keep chance agreements rare
    (measured on the evaluation set: ``docs/architecture.md``, "Copies people post")."""
    if len(descriptors) == 0:
        return []
    bits = np.unpackbits(descriptors, axis=1)[:, KEY_BITS].astype(np.int64)
    return sorted(set((bits @ (1 << np.arange(len(KEY_BITS), dtype=np.int64)[::-1])).tolist()))


def trim(image: Image.Image) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """The image without a uniform frame, or a caption bar at the top or bottom, at its edges (each
    side at most ``TRIM_MAX``), and the box kept."""
    rgb = np.asarray(image.convert("RGB"), dtype=np.int16)
    height, width = rgb.shape[:2]
    columns = rgb.transpose(1, 0, 2)
    top = _border_depth(rgb, int(height * TRIM_MAX), bar=True)
    bottom = _border_depth(rgb[::-1], int(height * TRIM_MAX), bar=True)
    left = _border_depth(columns, int(width * TRIM_MAX), bar=False)
    right = _border_depth(columns[::-1], int(width * TRIM_MAX), bar=False)
    box = (left, top, width - right, height - bottom)
    if box == (0, 0, width, height):
        return image, box
    return image.crop(box), box


def _border_depth(rgb: np.ndarray, limit: int, *, bar: bool) -> int:
    """How many lines from the first are border. A frame's lines are of one colour (``TRIM_SOLID``
    of their pixels within ``TRIM_TOLERANCE`` of the first line's median); a caption bar (``bar``:
    top and bottom) is black or white with thin text, so its lines need only ``TRIM_ROW_SHARE``."""
    if limit < 1:
        return 0
    edge = np.median(rgb[0], axis=0)
    if (np.abs(rgb[0] - edge) <= TRIM_TOLERANCE).all(axis=1).mean() < TRIM_SOLID:
        return 0  # the very edge is not one colour: no frame, no bar (most images: one line read)
    close = (np.abs(rgb[:limit] - edge) <= TRIM_TOLERANCE).all(axis=2).mean(axis=1)
    extreme = bool((edge <= 40).all() or (edge >= 215).all())
    share = TRIM_ROW_SHARE if bar and extreme else TRIM_SOLID
    below = np.flatnonzero(close < share)
    return int(below[0]) if len(below) else limit


@dataclass(frozen=True)
class Normalised:
    """An image reduced for the hash (``HASH_SIDE`` on its longer side), the box its trimming keeps
    (in that reduced image), and the content for the keypoints, made when first asked for: the box's
    region of the full image at ``WORK_SIDE`` on its longer side."""

    image: Image.Image = field(repr=False)  # the decoded image, RGB
    small: Image.Image = field(repr=False)
    box: tuple[int, int, int, int]

    @property
    def trimmed(self) -> bool:
        return self.box != (0, 0, *self.small.size)

    def small_content(self) -> Image.Image:
        return self.small.crop(self.box) if self.trimmed else self.small

    @functools.cached_property
    def content(self) -> Image.Image:
        scale = self.image.width / self.small.width, self.image.height / self.small.height
        left, top, right, bottom = self.box
        region = self.image.crop((left * scale[0], top * scale[1], right * scale[0], bottom * scale[1]))
        return _scaled(region, WORK_SIDE) if self.trimmed else _scaled(self.image, WORK_SIDE)


def normalise(image: Image.Image) -> Normalised:
    """Trimming is decided on the reduced image: frames and bars are far coarser than its pixels."""
    image = image if image.mode == "RGB" else image.convert("RGB")
    small = _scaled(image, HASH_SIDE)
    return Normalised(image, small, trim(small)[1])


def _scaled(image: Image.Image, side: int) -> Image.Image:
    scale = side / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.BILINEAR) if size != image.size else image


# OpenCV's ORB and CLAHE objects keep scratch buffers and release the GIL: one pair per thread (the
# web server's threads fingerprint uploads side by side; shared, they corrupted each other's output).
_local = threading.local()


def orb_features(image: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """ORB keypoint positions and descriptors, strongest first. The grey image's contrast is
    equalised locally first (CLAHE): a blurred or dim photograph has keypoints too."""
    if not hasattr(_local, "orb"):
        _local.orb = cv2.ORB_create(nfeatures=ORB_FEATURES, fastThreshold=ORB_FAST_THRESHOLD)
        _local.clahe = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8))
    if min(image.size) < ORB_MIN_SIDE:  # a sliver: no room for ORB's 31-pixel patches and its pyramid
        return np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8)
    grey = _local.clahe.apply(np.ascontiguousarray(np.asarray(image.convert("L"))))
    keypoints, descriptors = _local.orb.detectAndCompute(grey, None)
    if descriptors is None or not keypoints:
        return np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8)
    order = np.argsort([-k.response for k in keypoints], kind="stable")
    points = np.array([keypoints[i].pt for i in order], dtype=np.float32)
    return points, descriptors[order]


def _pdq(image: Image.Image, *, dihedral: bool) -> tuple[list[bytes], int]:
    if dihedral:
        bits, quality = pdqhash.compute_dihedral(np.asarray(image))
    else:
        one, quality = pdqhash.compute(np.asarray(image))
        bits = [one]
    return [np.packbits(b.astype(np.uint8)).tobytes() for b in bits], int(quality)


def fingerprint(image: Image.Image) -> Fingerprint:
    """An original's fingerprint, computed once at upload."""
    normalised = normalise(image)
    hashes, quality = _pdq(normalised.small, dihedral=False)
    if normalised.trimmed:
        hashes += _pdq(normalised.small_content(), dihedral=False)[0]
    content = normalised.content
    points, descriptors = orb_features(content)
    return Fingerprint(tuple(hashes), quality, content.size, normalised.box, normalised.small.size, points, descriptors)


@dataclass(frozen=True)
class Candidate:
    """A candidate's hashes in their dihedral variants (eight a hash), and its keypoints and its
    mirror's, computed when the keypoint stage first asks for them."""

    variants: tuple[bytes, ...]
    quality: int
    normalised: Normalised = field(repr=False)

    @property
    def trim(self) -> tuple[int, int, int, int]:
        return self.normalised.box

    @property
    def whole(self) -> tuple[int, int]:
        return self.normalised.small.size

    @property
    def size(self) -> tuple[int, int]:
        return self.normalised.content.size

    @functools.cached_property
    def features(self) -> tuple[np.ndarray, np.ndarray]:
        return orb_features(self.normalised.content)

    @functools.cached_property
    def mirror_features(self) -> tuple[np.ndarray, np.ndarray]:
        return orb_features(ImageOps.mirror(self.normalised.content))

    def query_bands(self) -> list[int]:
        """Every band value within one bit of a variant's band: an original within 31 bits of a
        variant shares at least one of them (16 bands; 31 differing bits leave one band with ≤ 1)."""
        flips = np.concatenate([[0], 1 << np.arange(BAND_BITS, dtype=np.int64)])
        return np.unique(_tagged_bands(self.variants)[:, :, None] ^ flips).tolist()

    def keys(self) -> list[int]:
        return sorted(set(keypoint_keys(self.features[1])) | set(keypoint_keys(self.mirror_features[1])))


def candidate(image: Image.Image) -> Candidate:
    """A candidate's fingerprint, computed in the analysis (its keypoints only if the hash does not
    decide)."""
    normalised = normalise(image)
    # The hashes of the whole image and of its content (when something was trimmed), eight variants
    # each; an original stores the same two. A framed copy's content meets the whole original; a
    # copy trimmed like its original meets the original's content; a copy whose trimming went
    # astray still has its whole image.
    variants, quality = _pdq(normalised.small, dihedral=True)
    if normalised.trimmed:
        variants += _pdq(normalised.small_content(), dihedral=True)[0]
    return Candidate(tuple(variants), quality, normalised)


def hamming(a: bytes, b: bytes) -> int:
    return int.from_bytes(a, "big").__xor__(int.from_bytes(b, "big")).bit_count()


@dataclass(frozen=True)
class Original:
    """An original as the keypoint stage needs it."""

    id: int
    name: str
    size: tuple[int, int]
    trim: tuple[int, int, int, int]
    whole: tuple[int, int]
    points: np.ndarray = field(repr=False)
    descriptors: np.ndarray = field(repr=False)


class AssetIndex(Protocol):
    def near_hashes(self, candidate: Candidate, limit: int) -> list[tuple[int, str, tuple[bytes, ...]]]:
        """(id, name, hashes) of the originals nearest by hash, of those that may lie within 31 bits
        of a variant (sharing a band within one bit)."""

    def keypoint_votes(self, keys: list[int], limit: int) -> list[int]:
        """Ids of the originals sharing the most keypoint keys, most first."""

    def originals(self, ids: list[int]) -> list[Original]: ...

    def empty(self) -> bool:
        """No original of the current fingerprint version to compare with."""

    def outdated(self) -> bool:
        """Some original still lacks the current fingerprint version."""


@dataclass
class Comparison:
    """The comparison's answer: the best original, the score, the stage that decided and why."""

    asset_id: int | None
    asset_name: str
    score: float
    stage: str  # "hash" or "keypoints"
    evidence: dict


def hash_score(bits: int) -> float:
    """``HASH_MATCH_BITS`` → 0.90, ``HASH_UNCLEAR_BITS`` → 0.75, linear between and beyond."""
    return _linear(bits, HASH_MATCH_BITS, HASH_UNCLEAR_BITS)


def keypoint_score(inliers: int) -> float:
    return _linear(inliers, KEYPOINT_MATCH_INLIERS, KEYPOINT_UNCLEAR_INLIERS)


def _linear(value: float, at_match: float, at_unclear: float) -> float:
    slope = (SCORE_MATCH - SCORE_UNCLEAR) / (at_match - at_unclear)
    return float(min(1.0, max(0.0, SCORE_MATCH + (value - at_match) * slope)))


def compare(cand: Candidate, index: AssetIndex, *, match_at: float = SCORE_MATCH) -> Comparison | None:
    """The best original for ``cand`` and the stage that found it (None when the index is empty).
    The keypoint stage runs when the hash's best score stays below ``match_at``."""
    if index.empty():
        return None
    near = index.near_hashes(cand, limit=SHORTLIST)
    hashed = None
    if near:
        bits, variant, asset_id, name, asset_hash = min(
            (hamming(v, h), i, asset_id, name, h)
            for asset_id, name, hashes in near
            for h in hashes
            for i, v in enumerate(cand.variants)
        )
        score = hash_score(bits)
        if cand.quality < PDQ_MIN_QUALITY:  # below the bands' match, whatever they are set to
            score = min(score, match_at - 0.01)
        hashed = Comparison(
            asset_id,
            name,
            score,
            "hash",
            {
                "stage": "hash",
                "hash": "pdq",
                "differing_bits": bits,
                "hash_bits": HASH_BITS,
                "variant": VARIANTS[variant % 8] + (" (its content, frame or bar trimmed)" if variant >= 8 else ""),
                "candidate_pdq": cand.variants[variant].hex(),
                "asset_pdq": asset_hash.hex(),
                "quality": cand.quality,
                "trimmed": list(cand.trim),
            },
        )
        if hashed.score >= match_at:
            return hashed
    shortlist = list(dict.fromkeys([a for a, _, _ in near] + index.keypoint_votes(cand.keys(), limit=SHORTLIST)))
    verified = max(
        (_verify(cand, original) for original in index.originals(shortlist)),
        key=lambda c: c.score,
        default=None,
    )
    best = max((c for c in (hashed, verified) if c is not None), key=lambda c: c.score, default=None)
    if best is None:  # nothing near by hash or keypoints: the closest is far; say so with the hash's numbers
        return Comparison(
            None,
            "",
            0.0,
            "hash",
            {
                "stage": "hash",
                "hash": "pdq",
                "differing_bits": None,
                "note": "no original shares a hash band or keypoints",
            },
        )
    if hashed is not None and best is verified:
        best.evidence["hash"] = {k: hashed.evidence[k] for k in ("differing_bits", "variant")}
    return best


def _verify(cand: Candidate, original: Original) -> Comparison:
    """Keypoint matches (ratio test) and a RANSAC homography of the candidate, and of its mirror,
    onto the original: the inliers of the better one."""
    if not hasattr(_local, "matcher"):
        _local.matcher = cv2.BFMatcher(cv2.NORM_HAMMING)
    best = (0, None, None, False, 0, len(cand.features[0]))
    for mirrored, (points, descriptors) in ((False, cand.features), (True, cand.mirror_features)):
        if len(descriptors) < 4 or len(original.descriptors) < 4:
            continue
        pairs = _local.matcher.knnMatch(descriptors, original.descriptors, k=2)
        good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < KEYPOINT_RATIO * p[1].distance]
        if len(good) < 4:
            continue
        source = points[[m.queryIdx for m in good]]
        target = original.points[[m.trainIdx for m in good]]
        homography, mask = cv2.findHomography(source, target, cv2.RANSAC, RANSAC_PIXELS)
        if homography is None or not _plausible(homography):
            continue
        inliers = int(mask.sum())
        if inliers > best[0]:
            kept = mask.ravel() == 1
            best = (inliers, source[kept], target[kept], mirrored, len(good), len(points))
    inliers, source, target, mirrored, good, found = best
    evidence = {
        "stage": "keypoints",
        "inliers": inliers,
        "matches": good,
        "keypoints": [found, len(original.points)],
        "mirrored": mirrored,
    }
    if inliers:
        # At most 40 inlier pairs, as shares of each whole image: the review workspace draws them.
        step = max(1, inliers // 40)
        if mirrored:  # the mirror's keypoints, back on the candidate as it is
            source = np.column_stack([cand.size[0] - 1 - source[:, 0], source[:, 1]])
        ours = _shares(source[::step][:40], cand.size, cand.trim, cand.whole)
        theirs = _shares(target[::step][:40], original.size, original.trim, original.whole)
        evidence["pairs"] = np.round(np.hstack([ours, theirs]), 4).tolist()
    return Comparison(original.id, original.name, keypoint_score(inliers), "keypoints", evidence)


def _shares(points: np.ndarray, size, trim, whole) -> np.ndarray:
    """Positions in the normalised content as shares of the whole image's width and height."""
    left, top, right, bottom = trim
    scale = np.array([(right - left) / size[0], (bottom - top) / size[1]])
    return (points * scale + np.array([left, top])) / np.array(whole)


def _plausible(homography: np.ndarray) -> bool:
    """A copy is the original scaled, turned and shifted, perhaps slightly skewed: not folded over
    (negative determinant) nor shrunk or blown up beyond 1:8."""
    affine = homography[:2, :2] / homography[2, 2]
    determinant = float(np.linalg.det(affine))
    return 1 / 64 < determinant < 64 and abs(homography[2, 0]) < 0.005 and abs(homography[2, 1]) < 0.005


class MemoryIndex:
    """Fingerprints held in memory, read in full: for ``match_image`` and the benchmark."""

    def __init__(self, prints: dict[int, tuple[str, Fingerprint]]):
        self.prints = prints

    def empty(self) -> bool:
        return not self.prints

    def outdated(self) -> bool:
        return False  # fingerprinted when the index was made

    def near_hashes(self, cand: Candidate, limit: int) -> list[tuple[int, str, tuple[bytes, ...]]]:
        bands = set(cand.query_bands())
        near = [
            (min(hamming(v, h) for v in cand.variants for h in fp.hashes), asset_id, name, fp.hashes)
            for asset_id, (name, fp) in self.prints.items()
            if bands.intersection(fp.bands())
        ]
        return [(asset_id, name, hashes) for _, asset_id, name, hashes in sorted(near)[:limit]]

    def keypoint_votes(self, keys: list[int], limit: int) -> list[int]:
        wanted = set(keys)
        votes = sorted(
            (-len(wanted.intersection(fp.keypoint_keys())), asset_id) for asset_id, (_, fp) in self.prints.items()
        )
        return [asset_id for count, asset_id in votes[:limit] if count]

    def originals(self, ids: list[int]) -> list[Original]:
        found = [(i, *self.prints[i]) for i in ids if i in self.prints]
        return [Original(i, name, fp.size, fp.trim, fp.whole, fp.points, fp.descriptors) for i, name, fp in found]
