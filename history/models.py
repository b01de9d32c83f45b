"""The archive's records: its files and where each archived job's document is. Their tables keep the
names they had in the console (``dashboard_*``), where they began."""

from django.db import models

from jobs.models import LeitstandNow


class ArchiveFile(models.Model):
    """One file of the archive: the export documents of jobs that ended on ``day``, of one type, as
    gzip-compressed JSON Lines (``LEITSTAND_ARCHIVE_DIR``/``path``). Written before its jobs leave
    PostgreSQL: *pending* (jobs chosen, the file being written), *written* (durable and verified
    against ``sha256``; its jobs may be purged), *purged* (they were). A file that cannot be written
    is *failed* with the reason, and purging stops (alert ``archive_failing``)."""

    class State(models.TextChoices):
        PENDING = "pending"
        WRITTEN = "written"
        PURGED = "purged"
        FAILED = "failed"

    path = models.CharField(max_length=500, unique=True, help_text="Relative to the archive directory.")
    day = models.DateField(help_text="The day (UTC) its jobs ended.")
    job_type = models.CharField(max_length=64)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    jobs = models.PositiveIntegerField(default=0, help_text="Jobs written to it.")
    purged = models.PositiveIntegerField(default=0, help_text="Of those, the jobs that left PostgreSQL.")
    bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(db_default=LeitstandNow())
    written_at = models.DateTimeField(null=True, blank=True)
    purged_at = models.DateTimeField(null=True, blank=True)
    indexed = models.BooleanField(
        default=True,
        help_text="Its jobs are in the archive index (ArchivedJob); after the index's retention they are "
        "found by reading the file.",
    )

    class Meta:
        db_table = "dashboard_archivefile"
        indexes = [models.Index(fields=["state"], name="archivefile_open_idx", condition=~models.Q(state="purged"))]

    def __str__(self) -> str:
        return self.path


class ArchivedJob(models.Model):
    """Where an archived job's document is: its file and line. Written when the job is chosen for a
    file (so no job is archived twice), kept after the job left PostgreSQL (so ``export_job`` and the
    console find it) for ``archive_index_days``; then the file is marked not ``indexed``."""

    job_id = models.UUIDField(primary_key=True)
    file = models.ForeignKey(ArchiveFile, on_delete=models.PROTECT, related_name="members")
    line = models.PositiveIntegerField(help_text="0-based line of its document in the file.")
    type = models.CharField(max_length=64)
    state = models.CharField(max_length=20)
    correlation_id = models.CharField(max_length=255, db_index=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "dashboard_archivedjob"

    def __str__(self) -> str:
        return f"{self.type} {self.job_id} (archived in {self.file_id})"
