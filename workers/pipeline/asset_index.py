"""The protected originals as the comparison's index, in PostgreSQL (``matching.AssetIndex``).

An original stores its fingerprint at upload (``fingerprint_fields``, ``keys_store``): its PDQ
hashes, the hashes' 16-bit bands as an integer array with a GIN index, its keypoints for the geometric
check, and the keys of its ORB descriptors in a table of their own. A candidate reads only what lies near it:

- **by hash** — the originals sharing one of the candidate's band values within one bit (multi-index
  hashing: ``pdq_bands && …``); PostgreSQL computes their exact distances (``bit_count`` of the XOR)
  and returns the nearest few;
- **by keypoints** — the originals sharing the most keypoint keys (``AssetKeypointKey``: one row per
  key and original, looked up by key);
- the keypoints of the shortlisted few.

No query reads every original: what grows with the number of originals is the GIN posting lists a
candidate's keys hit (``bench/matching_scale.py`` measures it to 10,000 originals).
"""

from __future__ import annotations

from django.db import connection

from workers.pipeline import matching
from workers.pipeline.models import AssetKeypointKey, ProtectedAsset

TABLE = ProtectedAsset._meta.db_table
KEYS_TABLE = AssetKeypointKey._meta.db_table


def fingerprint_fields(print_: matching.Fingerprint) -> dict:
    """The model fields of an original's fingerprint (its keypoint keys: ``keys_store``)."""
    return {
        "fingerprint_version": matching.FINGERPRINT_VERSION,
        "pdq_hashes": [h.hex() for h in print_.hashes],
        "pdq_bands": print_.bands(),
        "keypoints": print_.keypoints_blob(),
        "fingerprint": {
            "size": list(print_.size),
            "trim": list(print_.trim),
            "whole": list(print_.whole),
            "quality": print_.quality,
        },
    }


def keys_store(asset_id: int, print_: matching.Fingerprint, *, model=AssetKeypointKey) -> None:
    """An original's keypoint keys in the index, replacing what it had."""
    model.objects.filter(asset_id=asset_id).delete()
    model.objects.bulk_create([model(key=key, asset_id=asset_id) for key in print_.keypoint_keys()])


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

    def _scope(self, alias: str) -> str:
        return f"AND {alias}.id = ANY(%s::int[])" if self.only is not None else ""

    def _scope_params(self) -> list:
        return [self.only] if self.only is not None else []

    def count(self) -> int:
        originals = ProtectedAsset.objects.filter(fingerprint_version=matching.FINGERPRINT_VERSION)
        return (originals.filter(pk__in=self.only) if self.only is not None else originals).count()

    def near_hashes(self, cand: matching.Candidate, limit: int) -> list[tuple[int, str, tuple[bytes, ...]]]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT a.id, a.name, a.pdq_hashes,
                       (SELECT min(bit_count(('x' || h)::bit(256) # ('x' || v)::bit(256)))
                          FROM unnest(a.pdq_hashes) h, unnest(%s::text[]) v) AS bits
                  FROM {TABLE} a
                 WHERE a.pdq_bands && %s::int[] AND a.fingerprint_version = %s {self._scope("a")}
                 ORDER BY bits, a.id
                 LIMIT %s
                """,
                [_array(v.hex() for v in cand.variants), _array(cand.query_bands()), matching.FINGERPRINT_VERSION]
                + self._scope_params()
                + [limit],
            )
            return [(pk, name, tuple(bytes.fromhex(h) for h in hashes)) for pk, name, hashes, _ in cursor.fetchall()]

    def keypoint_votes(self, keys: list[int], limit: int) -> list[int]:
        if not keys:
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT k.asset_id, count(*) AS votes
                  FROM {KEYS_TABLE} k JOIN {TABLE} a ON a.id = k.asset_id
                 WHERE k.key = ANY(%s::int[]) AND a.fingerprint_version = %s {self._scope("a")}
                 GROUP BY k.asset_id
                 ORDER BY votes DESC, k.asset_id
                 LIMIT %s
                """,
                [_array(keys), matching.FINGERPRINT_VERSION] + self._scope_params() + [limit],
            )
            return [pk for pk, _ in cursor.fetchall()]

    def originals(self, ids: list[int]) -> list[matching.Original]:
        rows = ProtectedAsset.objects.filter(pk__in=ids).values_list("id", "name", "fingerprint", "keypoints")
        return [
            matching.Original(
                pk,
                name,
                tuple(meta["size"]),
                tuple(meta["trim"]),
                tuple(meta["whole"]),
                *matching.Fingerprint.keypoints_from_blob(bytes(blob)),
            )
            for pk, name, meta, blob in rows
        ]
