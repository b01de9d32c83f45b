"""``manage.py match_image [--asset ORIGINAL] CANDIDATE…``: why did (or didn't) an image match?

One JSON line per candidate file: the verdict, the score, the stage that decided and its evidence —
computed by the analysis handler's own comparison and bands of the running version
(``analysis.version_spec``, ``analysis.compare``, ``analysis.verdict_for``), without a job.
``--asset`` names the original: a registered asset's id, or an image file (fingerprinted as an upload
would be). Without it, the candidate is compared with every registered original through the
database's index, as the analysis does.
"""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from workers.pipeline import analysis, images, matching
from workers.pipeline.asset_index import DatabaseIndex
from workers.pipeline.models import ProtectedAsset
from workers.pipeline.services import MAX_ASSET_BYTES


class Command(BaseCommand):
    help = "Compare image files with a protected original (or all of them) as the analysis does; one JSON line each."

    def add_arguments(self, parser):
        parser.add_argument("candidates", nargs="+", metavar="CANDIDATE", help="image files")
        parser.add_argument("--asset", metavar="ORIGINAL", help="a registered asset's id, or an image file")

    def handle(self, *args, candidates, asset, **options):
        method, bands = analysis.version_spec(analysis.running_version())
        if method == "dhash" and asset:
            raise CommandError(f"--asset needs analysis@2's index; the pools run {analysis.running_version()}")
        index = self._index(asset) if asset else None
        for path in candidates:
            line = {"candidate": path}
            try:
                decoded = images.decode(_read(path))
            except (CommandError, images.ImageRefused) as exc:
                line["error"] = str(exc)
            else:
                comparison = analysis.compare(decoded, bands, method=method, index=index)
                if comparison is None:
                    raise CommandError("no protected assets are registered to compare with")
                line.update(
                    verdict=analysis.verdict_for(comparison.score, bands),
                    score=round(comparison.score, 4),
                    stage=comparison.stage,
                    asset_id=comparison.asset_id,
                    asset=comparison.asset_name,
                    evidence={k: v for k, v in comparison.evidence.items() if k != "pairs"},
                    bands=dict(bands),
                )
            self.stdout.write(json.dumps(line, ensure_ascii=False))

    def _index(self, asset: str) -> matching.AssetIndex:
        if not Path(asset).is_file() and asset.isascii() and asset.isdigit():
            registered = ProtectedAsset.objects.filter(pk=int(asset)).first()
            if registered is None:
                raise CommandError(f"--asset {asset}: no protected asset has this id")
            if registered.fingerprint_version != matching.FINGERPRINT_VERSION:
                raise CommandError(f"--asset {asset}: its fingerprint is outdated; run manage.py fingerprint_assets")
            return DatabaseIndex(only=[registered.pk])
        try:
            decoded = images.decode(_read(asset))
        except images.ImageRefused as exc:
            raise CommandError(f"--asset {asset}: {exc}") from None
        return matching.MemoryIndex({0: (Path(asset).name, matching.fingerprint(decoded.pixels))})


def _read(path: str) -> bytes:
    file = Path(path)
    if not file.is_file():
        raise CommandError(f"{path}: no such file")
    if file.stat().st_size > MAX_ASSET_BYTES:
        raise CommandError(f"{path}: {file.stat().st_size} bytes; the limit is {MAX_ASSET_BYTES}")
    return file.read_bytes()
