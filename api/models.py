"""The API's records: its clients' bearer tokens and their per-minute request counts."""

from django.db import models

from jobs.models import Client, LeitstandNow


class ApiToken(models.Model):
    """A bearer token of the REST API; it acts for its client (``jobs.Client``). Only a SHA-256 of the secret is stored, found by its prefix;
    the token itself is shown once, when it is created (``manage.py create_api_token``)."""

    name = models.CharField(max_length=100, unique=True)
    client = models.ForeignKey(Client, on_delete=models.PROTECT, related_name="tokens", help_text="Whose token.")
    prefix = models.CharField(max_length=12, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(db_default=LeitstandNow())
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    class Meta:
        db_table = "jobs_apitoken"  # created by the jobs app before the API had its own package


class ApiRateWindow(models.Model):
    """Requests of one token in one minute, counted in PostgreSQL so every web process shares it."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    window_start = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)
    jobs = models.PositiveIntegerField(default=0, db_default=0, help_text="Jobs submitted in this minute.")

    class Meta:
        db_table = "jobs_apiratewindow"
        constraints = [models.UniqueConstraint(fields=["token", "window_start"], name="rate_window_once")]


class ApiAddressWindow(models.Model):
    """Requests in one minute from one address that presented no valid token (guessing is limited)."""

    address = models.CharField(max_length=45)
    window_start = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["address", "window_start"], name="address_window_once")]


class ApiRefusalWindow(models.Model):
    """Submissions the API refused to protect a pool (backpressure: a 429 for a client at its bound of
    open jobs, a 503 for a full bulk lane), per client, pool, reason and minute: what the alert rule
    ``api_submissions_refused`` reads. Kept a day (``api.backpressure``); a refusal costs one count."""

    class Reason(models.TextChoices):
        CLIENT_OPEN_JOBS = "client_open_jobs", "429: the client is at its bound of open jobs"
        BULK_LANE_FULL = "bulk_lane_full", "503: the pool's bulk lane is full"

    client = models.ForeignKey("jobs.Client", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    pool = models.CharField(max_length=64)
    reason = models.CharField(max_length=32, choices=Reason.choices)
    window_start = models.DateTimeField()
    refused = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["client", "pool", "reason", "window_start"], name="refusal_window_once", nulls_distinct=False
            )
        ]
        indexes = [models.Index(fields=["window_start"], name="refusal_window_start_idx")]
