"""``manage.py fingerprint_assets``: fingerprint the protected originals whose fingerprint is missing
or of another version than the analysis's (``matching.FINGERPRINT_VERSION``), in batches."""

from django.core.management.base import BaseCommand

from workers.pipeline import matching
from workers.pipeline.services import assets_fingerprint


class Command(BaseCommand):
    help = "Compute the comparison's fingerprints of protected originals that lack the current version's."

    def handle(self, *args, **options):
        done = assets_fingerprint()
        self.stdout.write(f"{done} original(s) fingerprinted ({matching.FINGERPRINT_VERSION})")
