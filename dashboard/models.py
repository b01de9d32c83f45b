"""The console's own records: the counts snapshot and trend rollups the control process refreshes,
bulk operations and dead-letter reviews."""

from django.db import models

from jobs.models import LeitstandNow


class Rollup(models.Model):
    """One job type's figures for one minute, recorded by the control process for the trend charts
    (``dashboard/operations/trends.py``); kept ``LEITSTAND_ROLLUP_DAYS``."""

    minute = models.DateTimeField(help_text="The minute's start (database time).")
    job_type = models.CharField(max_length=64)
    pool = models.CharField(max_length=64, blank=True)
    due = models.PositiveIntegerField(default=0, help_text="Planned jobs at the minute's end (due or not yet).")
    running = models.PositiveIntegerField(default=0, help_text="Reserved or running at the minute's end.")
    waiting_retry = models.PositiveIntegerField(default=0, help_text="Failed, waiting for their next attempt.")
    done = models.PositiveIntegerField(default=0, help_text="Jobs that ended done within the minute.")
    dead = models.PositiveIntegerField(default=0, help_text="Jobs that ended dead within the minute.")
    oldest_due_seconds = models.FloatField(null=True)
    p50_ms = models.FloatField(null=True, help_text="Run time of the type's latest attempts, median.")
    p95_ms = models.FloatField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["minute", "job_type"], name="rollup_minute_type_uniq")]

    def __str__(self) -> str:
        return f"{self.job_type} at {self.minute:%Y-%m-%d %H:%M}"


class ConsoleSnapshot(models.Model):
    """Figures that would cost a scan of millions of jobs per page view, computed every few seconds
    by the control process and read by the console home with one query."""

    name = models.CharField(max_length=50, primary_key=True)
    data = models.JSONField(default=dict)
    refreshed_at = models.DateTimeField(db_default=LeitstandNow())
    took_ms = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.name} snapshot of {self.refreshed_at}"


class BulkOperation(models.Model):
    """An action on every job a filter matches, run by the control process in throttled batches.

    Pinned to its filter and a high-water mark: jobs created after the operator looked at the
    filter are never touched. Progress is visible while it runs."""

    class State(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    action = models.CharField(max_length=32)
    filter = models.JSONField(help_text="The jobs list's filter it acts on.")
    high_water = models.DateTimeField(help_text="Only jobs created up to this moment are touched.")
    actor = models.CharField(max_length=255)
    reason = models.CharField(max_length=500)
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    eligible = models.PositiveIntegerField(help_text="Eligible when it started (the dry run's figure).")
    changed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0, help_text="Matched but no longer eligible when their batch ran.")
    cursor = models.UUIDField(null=True, blank=True, help_text="Keyset position: the last job ID handled.")
    batches = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(db_default=LeitstandNow())
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.action} on {self.filter} ({self.changed}/{self.eligible}, {self.state})"

    @property
    def percent(self) -> int:
        return (
            100
            if self.state == self.State.DONE
            else min(100, int(100 * (self.changed + self.skipped) / max(self.eligible, 1)))
        )


class DeadLetterReview(models.Model):
    """A person's review of one dead-letter group (type × error class × step): the decision and a
    note. New dead jobs in the group after the review reopen it (``reopened_at``, set by the
    control process's dead-letter sweep)."""

    class Decision(models.TextChoices):
        RETRY = "retry", "retry after a fix"
        CANCEL = "cancel"
        WATCH = "watch", "keep watching"

    type = models.CharField(max_length=64)
    error_class = models.CharField(max_length=255)
    step = models.CharField(max_length=64)
    decision = models.CharField(max_length=10, choices=Decision.choices)
    note = models.CharField(max_length=1000)
    reviewed_by = models.CharField(max_length=255)
    reviewed_at = models.DateTimeField()
    reopened_at = models.DateTimeField(null=True, blank=True, help_text="New dead jobs came after the review.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["type", "error_class", "step"], name="deadletterreview_group_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.error_class} {self.step}: {self.decision}"
