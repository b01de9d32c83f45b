"""The console's own records: the counts snapshot the control process refreshes."""

from django.db import models

from jobs.models import LeitstandNow


class ConsoleSnapshot(models.Model):
    """Figures that would cost a scan of millions of jobs per page view, computed every few seconds
    by the control process and read by the console home with one query."""

    name = models.CharField(max_length=50, primary_key=True)
    data = models.JSONField(default=dict)
    refreshed_at = models.DateTimeField(db_default=LeitstandNow())
    took_ms = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.name} snapshot of {self.refreshed_at}"


class AuditEntry(models.Model):
    """Append-only record of every console action: who did what to which objects, why, and the result."""

    at = models.DateTimeField(db_default=LeitstandNow())
    actor = models.CharField(max_length=255)
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=500, help_text="An object, or the filter a bulk action acted on.")
    reason = models.CharField(max_length=500, blank=True)
    result = models.CharField(max_length=500)

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["-at"], name="auditentry_at_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"
