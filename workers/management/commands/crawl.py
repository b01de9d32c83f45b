"""``manage.py crawl [--source NAME ...] [--run RUN]``: start a crawl run over the active sources."""

from django.core.management.base import BaseCommand, CommandError

from jobs.services import JobInputError
from workers.pipeline.models import Source
from workers.pipeline.services import crawl_start


class Command(BaseCommand):
    help = "Start a crawl run: one crawl job per source at its base URL (idempotent per run name)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--source", action="append", default=[], help="a source's name (repeatable; default: all active)"
        )
        parser.add_argument("--run", default=None, help="the run's name (default: run-<timestamp>)")

    def handle(self, *args, source, run, **options):
        sources = None
        if source:
            found = {s.name: s for s in Source.objects.filter(name__in=source)}
            missing = [name for name in source if name not in found]
            if missing:
                raise CommandError(
                    f"no such source: {', '.join(missing)}; sources: "
                    f"{', '.join(Source.objects.order_by('name').values_list('name', flat=True)) or 'none'}"
                )
            sources = [found[name] for name in source]
        if run is not None and not 0 < len(run) <= 100:
            raise CommandError("--run must be 1-100 characters")
        chosen = sources if sources is not None else list(Source.objects.filter(is_active=True).order_by("name"))
        if not chosen:
            raise CommandError("no active sources to crawl")
        try:
            submissions = crawl_start(actor="command:crawl", sources=chosen, run=run)
        except JobInputError as exc:
            raise CommandError(str(exc)) from None
        started = {submission.job.payload["source_id"] for submission in submissions}
        for source in Source.objects.filter(pk__in=[s.pk for s in chosen]).exclude(pk__in=started).order_by("name"):
            # Left out with its reason recorded on it; the others started.
            self.stderr.write(f"source {source.pk} not started: {source.start_error!r}")
        if not submissions:
            raise CommandError("no source could be started")
        for submission in submissions:
            job = submission.job
            self.stdout.write(
                f"{job.id} {job.source} {job.payload['url']} "
                f"({'started' if submission.created else 'already started in this run'})"
            )
