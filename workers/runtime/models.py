"""The runtime's records: pools (pausable), the worker registry (one row per worker process, kept
fresh by heartbeats) and shadow runs (another handler version run on a finished job's input)."""

from django.db import models

from jobs.models import LeitstandNow


class Pool(models.Model):
    """A worker pool's operator-controlled state. Paused pools get no wake-ups and claim nothing."""

    name = models.CharField(max_length=64, primary_key=True)
    is_paused = models.BooleanField(default=False)
    changed_at = models.DateTimeField(db_default=LeitstandNow())
    changed_by = models.CharField(max_length=255, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    # Written by the pool's supervisor: set while the pool has due work, idle workers and no claim
    # that its healing could restore (the pool_stalled alert reads it); cleared by the next claim.
    stalled_since = models.DateTimeField(null=True, blank=True)
    stalled_on = models.CharField(max_length=255, blank=True, help_text="host:pid of the supervisor that reported it")
    stall_note = models.CharField(max_length=500, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.is_paused else 'running'})"


class WorkerProcess(models.Model):
    """A process that runs jobs. Liveness is the age of ``last_seen_at`` (database time), never what
    the process last said about itself."""

    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    pool = models.CharField(max_length=64)
    started_at = models.DateTimeField(db_default=LeitstandNow())
    last_seen_at = models.DateTimeField(db_default=LeitstandNow())
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=255, blank=True)
    current_job_id = models.UUIDField(null=True, blank=True)
    rss_bytes = models.PositiveBigIntegerField(default=0)
    cpu_percent = models.FloatField(default=0.0, help_text="CPU use of the process since its previous refresh.")
    disk_free_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Free space on the host's data disk."
    )
    jobs_done = models.PositiveBigIntegerField(default=0)
    wakeups = models.PositiveBigIntegerField(default=0)
    duplicate_wakeups = models.PositiveBigIntegerField(
        default=0, help_text="Wake-ups that found nothing to claim (redelivered or raced): harmless, counted."
    )

    class Meta:
        verbose_name_plural = "worker processes"
        indexes = [models.Index(fields=["pool", "last_seen_at"], name="workerprocess_pool_seen_idx")]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} ({self.pool})"


class ShadowRun(models.Model):
    """Another handler version run on a job's input without touching the job (``replay --shadow``
    or sampled by the control process): what it would have done, compared with what the job did."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="shadow_runs")
    job_type = models.CharField(max_length=64)
    processing_version = models.CharField(max_length=100)
    real_version = models.CharField(max_length=100, blank=True)
    outcome = models.CharField(max_length=20, help_text="done, skipped, recheck, review, failed or deferred.")
    detail = models.CharField(max_length=500, blank=True)
    path_signature = models.CharField(max_length=500, blank=True)
    same = models.BooleanField(help_text="Outcome, result and path equal the job's.")
    differences = models.JSONField(default=list, blank=True)
    effects = models.JSONField(default=list, blank=True, help_text="What it would have applied.")
    children = models.JSONField(default=list, blank=True, help_text="The jobs it would have created.")
    sampled = models.BooleanField(default=False, help_text="Started by the control process's sampling.")
    actor = models.CharField(max_length=255)
    created_at = models.DateTimeField(db_default=LeitstandNow())

    class Meta:
        indexes = [models.Index(fields=["job_type", "processing_version", "-id"], name="shadow_version_idx")]

    def __str__(self) -> str:
        return f"shadow {self.processing_version} of {self.job_id}: {'same' if self.same else 'different'}"
