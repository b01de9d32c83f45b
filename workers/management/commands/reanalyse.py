"""``manage.py reanalyse [--limit N] [--dry-run]``: analyse again, with the running analysis version,
the candidates whose findings are all of another version (after an upgrade: an unchanged page spawns
no analysis). One batch per version; a second call takes only what the first did not."""

from django.core.management.base import BaseCommand, CommandError

from jobs.services import JobInputError
from workers.pipeline.analysis import running_version
from workers.pipeline.services import reanalysis_start


class Command(BaseCommand):
    help = "Submit analysis jobs of the running version for candidates analysed only by other versions."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=10_000, help="at most this many candidates (default 10000)")
        parser.add_argument("--dry-run", action="store_true", help="count them, submit nothing")
        parser.add_argument("--actor", default="manage.py reanalyse")

    def handle(self, *args, limit, dry_run, actor, **options):
        try:
            count, batch = reanalysis_start(actor=actor, limit=limit, dry_run=dry_run)
        except JobInputError as exc:
            raise CommandError(str(exc)) from None
        version = running_version()
        if dry_run:
            self.stdout.write(f"{count} candidate(s) would be analysed again with {version}; nothing was submitted")
        elif batch is None:
            self.stdout.write(f"every analysed candidate has a finding of {version} or a job for one: nothing to do")
        else:
            self.stdout.write(
                f"{count} candidate(s) submitted for analysis with {version}: batch {batch.pk} ({batch.name})"
            )
