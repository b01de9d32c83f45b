"""Pools (pausable) and the worker registry: one row per worker process, kept fresh by heartbeats."""

from django.db import models

from jobs.models import LeitstandNow


class Pool(models.Model):
    """A worker pool's operator-controlled state. Paused pools get no wake-ups and claim nothing."""

    name = models.CharField(max_length=64, primary_key=True)
    is_paused = models.BooleanField(default=False)
    changed_at = models.DateTimeField(db_default=LeitstandNow())
    changed_by = models.CharField(max_length=255, blank=True)
    reason = models.CharField(max_length=500, blank=True)

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


class RobotsFile(models.Model):
    """A site's robots.txt as last fetched, shared by every worker on every host (RFC 9309)."""

    origin = models.CharField(max_length=300, unique=True, help_text="scheme://host:port")
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="HTTP status; empty: unreachable")
    body = models.TextField(blank=True)
    error = models.CharField(max_length=500, blank=True)
    fetched_at = models.DateTimeField(db_default=LeitstandNow())
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"robots.txt of {self.origin} ({self.status or self.error})"


class HostState(models.Model):
    """Politeness towards one host (``host:port``), shared by every worker on every host.

    Guarded single-statement updates in ``workers.politeness`` keep at most one request in flight
    per host, space requests by the host's delay, honour Retry-After, and open a circuit breaker
    after repeated failures, so retries never become a storm against a fragile site.
    """

    host = models.CharField(max_length=300, primary_key=True)
    next_allowed_at = models.DateTimeField(db_default=LeitstandNow())
    in_flight_until = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    breaker_open_until = models.DateTimeField(null=True, blank=True)
    last_outcome = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return self.host
