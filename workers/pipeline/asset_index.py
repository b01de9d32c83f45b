"""The protected originals as the comparison's index, in PostgreSQL (``matching.AssetIndex``).

An original stores its fingerprint at upload (``fingerprint_fields``, ``keys_store``): its PDQ
hashes and its keypoints for the geometric check in its row, and two posting tables, each looked up
by its primary key's index: the 16-bit bands of its hashes (``AssetHashBand``) and the keys of its
ORB descriptors (``AssetKeypointKey``). A candidate reads only what lies near it:

- **by hash** — the originals with one of the candidate's band values within one bit (multi-index
  hashing: every original within 31 bits is among them); PostgreSQL computes their exact distances
  (``bit_count`` of the XOR) and returns the nearest few;
- **by keypoints** — the originals sharing the most keypoint keys;
- the keypoints of the shortlisted few.

No query reads every original: what grows with their number is the postings a candidate's bands and
keys hit (``bench/matching_scale.py`` measures it to 10,000 originals).
"""

from __future__ import annotations

import functools

from django.db import connection
from django.db.models import Q

from workers.pipeline import matching
from workers.pipeline.models import AssetHashBand, AssetKeypointKey, ProtectedAsset

TABLE = ProtectedAsset._meta.db_table
BANDS_TABLE = AssetHashBand._meta.db_table
KEYS_TABLE = AssetKeypointKey._meta.db_table


def fingerprint_fields(print_: matching.Fingerprint) -> dict:
    """The model fields of an original's fingerprint (its keypoint keys: ``keys_store``)."""
    return {
        "fingerprint_version": matching.FINGERPRINT_VERSION,
        "pdq_hashes": [h.hex() for h in print_.hashes],
        "keypoints": print_.keypoints_blob(),
        "fingerprint": {
            "size": list(print_.size),
            "trim": list(print_.trim),
            "whole": list(print_.whole),
            "quality": print_.quality,
        },
    }


def keys_store(asset_id: int, print_: matching.Fingerprint, *, bands=AssetHashBand, keys=AssetKeypointKey) -> None:
    """An original's hash bands and keypoint keys in the index, replacing what it had. (``bands``,
    ``keys``: the models, or a migration's historical ones.)"""
    for model, values, field in ((bands, print_.bands(), "band"), (keys, print_.keypoint_keys(), "key")):
        model.objects.filter(asset_id=asset_id).delete()
        model.objects.bulk_create([model(**{field: value, "asset_id": asset_id}) for value in values])


def _array(values) -> str:
    """An array literal: a candidate's ~2,000 band values go as one string, not one parameter each
    (psycopg's list adaptation took a tenth of the comparison)."""
    return "{" + ",".join(map(str, values)) + "}"


class DatabaseIndex:
    """The originals of the current fingerprint version (``manage.py fingerprint_assets`` brings
    older ones up to it; the migration that introduced fingerprints did so once) — all of them, or
    the ones ``only`` names (``manage.py match_image --asset``)."""

    def __init__(self, only: list[int] | None = None):
        self.only = only
        self._originals: dict[int, matching.Original] = {}  # read before by this index's comparisons

    def _scope(self, alias: str, column: str = "id") -> str:
        return f"AND {alias}.{column} = ANY(%s::int[])" if self.only is not None else ""

    def _scope_params(self) -> list:
        return [self.only] if self.only is not None else []

    def empty(self) -> bool:
        return not self._state[0]

    def outdated(self) -> bool:
        """Some original lacks the current fingerprint (and has no error that keeps it out for good):
        its copies would be missed, so the analysis waits (``manage.py fingerprint_assets``)."""
        return self._state[1]

    @functools.cached_property
    def _state(self) -> tuple[bool, bool]:
        """(an original of the current fingerprint exists, an outdated one exists): by the index on
        ``fingerprint_version``, once per comparison."""
        version = matching.FINGERPRINT_VERSION
        originals = (
            ProtectedAsset.objects.all() if self.only is None else ProtectedAsset.objects.filter(pk__in=self.only)
        )
        outdated = originals.filter(fingerprint_error="").filter(
            Q(fingerprint_version__lt=version) | Q(fingerprint_version__gt=version)
        )
        return originals.filter(fingerprint_version=version).exists(), outdated.exists()

    def near_hashes(self, cand: matching.Candidate, limit: int) -> list[tuple[int, str, tuple[bytes, ...]]]:
        """Two look-ups by index: the originals with a band value near the candidate's, then the
        nearest few of them by exact distance. (One query joining both made PostgreSQL read every
        original: it cannot estimate how few rows ~2,000 band values find.)"""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT DISTINCT b.asset_id FROM {BANDS_TABLE} b WHERE b.band = ANY(%s::int[]) {self._scope('b', 'asset_id')}",
                [_array(cand.query_bands())] + self._scope_params(),
            )
            near = [row[0] for row in cursor.fetchall()]
            if not near:
                return []
            cursor.execute(
                f"""
                SELECT a.id, a.name, a.pdq_hashes,
                       (SELECT min(bit_count(('x' || h)::bit(256) # ('x' || v)::bit(256)))
                          FROM unnest(a.pdq_hashes) h, unnest(%s::text[]) v) AS bits
                  FROM {TABLE} a
                 WHERE a.id = ANY(%s::int[]) AND a.fingerprint_version = %s
                 ORDER BY bits, a.id
                 LIMIT %s
                """,
                [_array(v.hex() for v in cand.variants), _array(near), matching.FINGERPRINT_VERSION, limit],
            )
            return [(pk, name, tuple(bytes.fromhex(h) for h in hashes)) for pk, name, hashes, _ in cursor.fetchall()]

    def keypoint_votes(self, keys: list[int], limit: int) -> list[int]:
        """The keys are an original's current ones (``keys_store`` replaces them with its fingerprint):
        no join with the originals; ``originals`` drops one of another fingerprint version."""
        if not keys:
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT k.asset_id, count(*) AS votes
                  FROM {KEYS_TABLE} k
                 WHERE k.key = ANY(%s::int[]) {self._scope("k", "asset_id")}
                 GROUP BY k.asset_id
                 ORDER BY votes DESC, k.asset_id
                 LIMIT %s
                """,
                [_array(keys)] + self._scope_params() + [limit],
            )
            return [pk for pk, _ in cursor.fetchall()]

    def originals(self, ids: list[int]) -> list[matching.Original]:
        """The shortlisted originals with their keypoints; each read once by this index (an index
        shared by a batch of analysis jobs reads the originals their copies share once)."""
        missing = [pk for pk in ids if pk not in self._originals]
        if missing:
            rows = ProtectedAsset.objects.filter(
                pk__in=missing, fingerprint_version=matching.FINGERPRINT_VERSION
            ).values_list("id", "name", "fingerprint", "keypoints")
            for pk, name, meta, blob in rows:
                self._originals[pk] = matching.Original(
                    pk,
                    name,
                    tuple(meta["size"]),
                    tuple(meta["trim"]),
                    tuple(meta["whole"]),
                    *matching.Fingerprint.keypoints_from_blob(bytes(blob)),
                )
        return [self._originals[pk] for pk in ids if pk in self._originals]
