"""``manage.py fingerprint_assets [--retry-failed]``: fingerprint the protected originals whose
fingerprint is missing or of another version than the analysis's (``matching.FINGERPRINT_VERSION``),
one at a time. An original that cannot be decoded is marked with the reason and skipped next time
(``--retry-failed`` tries those again)."""

from django.core.management.base import BaseCommand

from workers.pipeline import matching
from workers.pipeline.services import assets_fingerprint


class Command(BaseCommand):
    help = "Compute the comparison's fingerprints of protected originals that lack the current version's."

    def add_arguments(self, parser):
        parser.add_argument("--retry-failed", action="store_true", help="try the originals marked as failed again")

    def handle(self, *args, retry_failed, **options):
        done, failed = assets_fingerprint(retry_failed=retry_failed)
        self.stdout.write(f"{done} original(s) fingerprinted ({matching.FINGERPRINT_VERSION})")
        for asset_id, reason in failed:
            self.stdout.write(f"original {asset_id} not fingerprinted (not compared): {reason}")
