"""Alerting's records: the alerts and their events, the business rules' violations, the routes with
their owners and contacts, route tests and silences. Their tables keep the names they had in the
console (``dashboard_*``), where they began."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from jobs.models import LeitstandNow


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
        db_table = "dashboard_alert"
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

    class Meta:
        db_table = "dashboard_alertevent"

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor}"


class RuleViolation(models.Model):
    """One subject breaking a business rule across jobs (``alerts/business_rules.py``): open while the
    control process still finds it, resolved when it no longer does."""

    rule = models.CharField(max_length=64)
    subject = models.CharField(max_length=200, help_text="What breaks the rule: a finding, a job.")
    job_id = models.UUIDField(null=True, blank=True, help_text="The job to look at.")
    detail = models.CharField(max_length=500)
    first_seen = models.DateTimeField(db_default=LeitstandNow())
    last_seen = models.DateTimeField(db_default=LeitstandNow())
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "dashboard_ruleviolation"
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


class Owner(models.Model):
    """A team that owns alert routes: who is responsible when one of its routes is notified."""

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)

    class Meta:
        db_table = "dashboard_owner"

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
        db_table = "dashboard_contact"
        ordering = ("owner", "name")

    def __str__(self) -> str:
        return f"{self.name} ({self.owner})"


WEEK_MINUTES, MONTH_HOURS, YEAR_HOURS = 7 * 24 * 60, 31 * 24, 366 * 24


class Route(models.Model):
    """Where an alert goes: its channels, its owner, when an unacknowledged alert escalates and is
    notified again, and how often the route's receipt is tested (``alerts/routes.py``, ``receipts.py``).
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

    class Meta:
        db_table = "dashboard_route"

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
        db_table = "dashboard_receipttest"
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
        db_table = "dashboard_silence"
        indexes = [models.Index(fields=["rule", "ends_at"], name="silence_rule_idx")]

    def __str__(self) -> str:
        return f"{self.rule} {self.scope or '(every scope)'} until {self.ends_at:%Y-%m-%d %H:%M}"
