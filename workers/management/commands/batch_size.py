"""``manage.py batch_size --pool crawl --target-minutes 15``: the recommended batch size, with each
factor and where it was measured (workers/runtime/sizing.py)."""

from django.core.management.base import BaseCommand, CommandError

from jobs.services import JobInputError
from workers.runtime.sizing import batch_size_recommendation


class Command(BaseCommand):
    help = "Recommend a batch size: live workers × measured throughput per worker per minute × target minutes."

    def add_arguments(self, parser):
        parser.add_argument("--pool", required=True)
        parser.add_argument("--target-minutes", type=float, required=True)
        parser.add_argument("--window-minutes", type=float, default=15, help="how far back to measure (default 15)")

    def handle(self, *args, pool, target_minutes, window_minutes, **options):
        try:
            sizing = batch_size_recommendation(pool=pool, target_minutes=target_minutes, window_minutes=window_minutes)
        except JobInputError as exc:
            raise CommandError(str(exc)) from None
        for line in sizing.explain():
            self.stdout.write(line)
