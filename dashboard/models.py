"""The console's own records: the counts snapshot the control process refreshes."""

from django.core.validators import MaxValueValidator, MinValueValidator
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


class Alert(models.Model):
    """One alert per rule and scope while it is open; resolved alerts are kept as history."""

    class State(models.TextChoices):
        PENDING = "pending", "pending (not yet held long enough)"
        FIRING = "firing"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    rule = models.CharField(max_length=64)
    scope = models.CharField(max_length=300, blank=True, help_text="pool:…, type:…, source:…, host:…, or empty")
    state = models.CharField(max_length=15, choices=State.choices)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)
    cleared_since = models.DateTimeField(null=True, blank=True, help_text="The condition has been clear since.")
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=255, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField()
    threshold = models.FloatField()
    diagnosis = models.CharField(max_length=1000)
    route = models.CharField(max_length=64, help_text="Who acts: the notification route.")
    severity = models.CharField(max_length=10, default="ticket", help_text="page (someone acts now) or ticket.")
    notified_at = models.DateTimeField(null=True, blank=True, help_text="Last notification of the route.")
    escalated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "scope"], condition=~models.Q(state="resolved"), name="alert_one_open_per_rule_scope"
            )
        ]
        indexes = [models.Index(fields=["state", "-last_seen"], name="alert_state_idx")]

    def __str__(self) -> str:
        return f"{self.rule} {self.scope} ({self.state})"


class AlertEvent(models.Model):
    """The history of an alert: fired, acknowledged, resolved — with actor and comment."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_default=LeitstandNow())
    kind = models.CharField(max_length=20)
    actor = models.CharField(max_length=255)
    comment = models.CharField(max_length=1000, blank=True)

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor}"


class RuleViolation(models.Model):
    """One subject breaking a business rule across jobs (``dashboard/operations/rules.py``): open while the
    control process still finds it, resolved when it no longer does."""

    rule = models.CharField(max_length=64)
    subject = models.CharField(max_length=200, help_text="What breaks the rule: a finding, a job.")
    job_id = models.UUIDField(null=True, blank=True, help_text="The job to look at.")
    detail = models.CharField(max_length=500)
    first_seen = models.DateTimeField(db_default=LeitstandNow())
    last_seen = models.DateTimeField(db_default=LeitstandNow())
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=models.Q(resolved_at__isnull=True),
                name="rule_violation_open_once",
            )
        ]
        indexes = [models.Index(fields=["rule", "-first_seen"], name="rule_violation_idx")]

    def __str__(self) -> str:
        return f"{self.rule}: {self.subject}"


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

    def __str__(self) -> str:
        return f"{self.type} {self.job_id} (archived in {self.file_id})"


class Owner(models.Model):
    """A team that owns alert routes: who is responsible when one of its routes is notified."""

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)

    def __str__(self) -> str:
        return self.name


class Contact(models.Model):
    """A person of an owning team, named in every notification of the team's routes."""

    owner = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="contacts")
    name = models.CharField(max_length=200)
    email = models.EmailField(blank=True)
    phone = models.CharField(max_length=50, blank=True)
    role = models.CharField(max_length=100, blank=True, help_text="e.g. on call, team lead")

    class Meta:
        ordering = ("owner", "name")

    def __str__(self) -> str:
        return f"{self.name} ({self.owner})"


WEEK_MINUTES, MONTH_HOURS, YEAR_HOURS = 7 * 24 * 60, 31 * 24, 366 * 24


class Route(models.Model):
    """Where an alert goes: its channels, its owner, when an unacknowledged alert escalates and is
    notified again, and how often the route's receipt is tested (``dashboard/operations/routes.py``, ``receipts.py``).
    Seeded from ``LEITSTAND_ALERT_ROUTES``; operators edit routes in the console (audited)."""

    name = models.SlugField(max_length=64, unique=True)
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, null=True, blank=True, related_name="routes")
    webhook_url = models.URLField(blank=True, help_text="Signed JSON POSTs (X-Leitstand-Signature).")
    webhook_secret = models.CharField(max_length=200, blank=True, help_text="The webhook's signing secret.")
    emails = models.JSONField(default=list, blank=True, help_text="E-mail addresses, a JSON list.")
    alertmanager_url = models.URLField(
        blank=True, help_text="Prometheus Alertmanager's base URL; alerts are posted to its v2 API."
    )
    ack_page_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=15,
        validators=[MinValueValidator(1), MaxValueValidator(WEEK_MINUTES)],
        help_text="A firing page-severity alert escalates when unacknowledged this long.",
    )
    ack_ticket_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=240,
        validators=[MinValueValidator(1), MaxValueValidator(WEEK_MINUTES)],
        help_text="The same for ticket-severity alerts; empty: never escalate.",
    )
    escalate_to = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", help_text="Escalation target."
    )
    renotify_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(WEEK_MINUTES)],
        help_text="Notify again at this interval until acknowledged; empty: never.",
    )
    test_every_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=168,
        validators=[MinValueValidator(1), MaxValueValidator(YEAR_HOURS)],
        help_text="Send a test notification at this interval; empty: never.",
    )
    confirm_within_hours = models.PositiveIntegerField(
        default=24,
        validators=[MinValueValidator(1), MaxValueValidator(MONTH_HOURS)],
        help_text="A test not confirmed within this time fires route_unconfirmed.",
    )
    fallback = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Where route_unconfirmed goes for this route (default: LEITSTAND_ALERT_FALLBACK_ROUTE).",
    )

    def __str__(self) -> str:
        return self.name

    @property
    def channels(self) -> list[str]:
        return [
            name
            for name, configured in (
                ("webhook", self.webhook_url),
                ("email", self.emails),
                ("alertmanager", self.alertmanager_url),
            )
            if configured
        ]

    def ack_minutes(self, severity: str) -> int | None:
        return self.ack_page_minutes if severity == "page" else self.ack_ticket_minutes


class ReceiptTest(models.Model):
    """A test notification sent to a route, and its confirmation: a signed, single-use link (console,
    login required) or the same token through the API."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="tests")
    sent_at = models.DateTimeField(db_default=LeitstandNow())
    sent_by = models.CharField(max_length=255, help_text="The schedule, or the operator who sent it now.")
    confirm_by = models.DateTimeField(help_text="Not confirmed by then: route_unconfirmed fires.")
    confirmed_at = models.DateTimeField(null=True, blank=True)
    confirmed_by = models.CharField(max_length=255, blank=True)
    confirmed_via = models.CharField(max_length=20, blank=True, help_text="console or api")

    class Meta:
        indexes = [models.Index(fields=["route", "-sent_at"], name="receipttest_route_idx")]

    def __str__(self) -> str:
        return f"test of {self.route} at {self.sent_at:%Y-%m-%d %H:%M:%S}"


class Silence(models.Model):
    """A rule muted for a scope (or every scope) until ``ends_at``: its alerts still evaluate and show
    as silenced, but notify nobody. Expires by itself; an operator may lift it earlier."""

    rule = models.CharField(max_length=64)
    scope = models.CharField(max_length=300, blank=True, help_text="Empty: every scope of the rule.")
    reason = models.CharField(max_length=500)
    created_by = models.CharField(max_length=255)
    created_at = models.DateTimeField(db_default=LeitstandNow())
    ends_at = models.DateTimeField()
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.CharField(max_length=255, blank=True)

    class Meta:
        indexes = [models.Index(fields=["rule", "ends_at"], name="silence_rule_idx")]

    def __str__(self) -> str:
        return f"{self.rule} {self.scope or '(every scope)'} until {self.ends_at:%Y-%m-%d %H:%M}"


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
