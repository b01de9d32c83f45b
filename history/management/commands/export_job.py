"""``manage.py export_job JOB_ID [--output FILE]``: the job, every attempt, transition, step event,
effect, review decision, finding, recheck plan and shadow run as one JSON document. A job that left
the database is read from the archive (its file's checksum verified), with ``archived`` saying where;
one older than the archive index's retention by reading the older files, newest first."""

import uuid

from django.core.management.base import BaseCommand, CommandError

from history.archive import ArchiveUnreadable, archived_document
from history.export import export_json, job_export_json
from jobs.models import Job


class Command(BaseCommand):
    help = "Export one job's whole history as JSON (for post-mortems and audits)."

    def add_arguments(self, parser):
        parser.add_argument("job_id")
        parser.add_argument("--output", help="write to this file instead of standard output")

    def handle(self, *args, job_id, output, **options):
        try:
            job = Job.objects.filter(pk=uuid.UUID(job_id)).first()
        except ValueError:
            raise CommandError(f"{job_id!r} is not a job ID (a UUID)") from None
        if job is not None:
            document = job_export_json(job)
        else:
            try:
                found = archived_document(job_id, scan=True)
            except ArchiveUnreadable as unreadable:
                raise CommandError(f"job {job_id} is archived, but its archive cannot be read: {unreadable}") from None
            if found is None:
                raise CommandError(f"no job {job_id}, in the database or the archive")
            entry, archived = found
            archived["archived"] = {"file": entry.file.path, "line": entry.line, "archived_on": entry.file.written_at}
            document = export_json(archived)
        if output:
            with open(output, "w", encoding="utf-8") as file:
                file.write(document + "\n")
            self.stderr.write(f"wrote {output} ({len(document)} characters)")
        else:
            self.stdout.write(document)
