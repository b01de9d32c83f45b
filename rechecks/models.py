"""Recheck plans and their observations.

A plan follows one reported match (the analysis job in ``recheck_due`` and its finding) until it
ends; each recheck job adds one observation, with the policy's decision and why.
"""

from django.db import models
from django.db.models import Q

from jobs.models import LeitstandNow
from rechecks.policy import EndReason, Kind, RecheckPolicy, Target


class RecheckPlan(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active"
        ENDED = "ended"

    job = models.OneToOneField(
        "jobs.Job",
        on_delete=models.PROTECT,
        related_name="recheck_plan",
        help_text="The original case: the analysis job that reported the match.",
    )
    finding = models.ForeignKey("workers.Finding", on_delete=models.PROTECT, related_name="recheck_plans")
    asset = models.ForeignKey("workers.ProtectedAsset", on_delete=models.PROTECT, related_name="+")
    correlation_id = models.CharField(max_length=255)
    url = models.CharField(max_length=2000, help_text="The copy that is checked again.")
    target = models.CharField(max_length=20, choices=[(t.value, t.value.replace("_", " ")) for t in Target])

    # The policy, copied from the settings when the plan was made: later changes do not alter it.
    first_delay_seconds = models.FloatField()
    min_interval_seconds = models.FloatField()
    max_interval_seconds = models.FloatField()
    widen_factor = models.FloatField()
    early_seconds = models.FloatField(help_text="The early check after a relevant status, or to confirm.")
    jitter = models.FloatField()
    confirmations_required = models.PositiveSmallIntegerField()
    deadline_at = models.DateTimeField(help_text="Not confirmed by then: a person decides.")

    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    interval_seconds = models.FloatField()
    unchanged_count = models.PositiveIntegerField(default=0)
    confirmations = models.PositiveSmallIntegerField(default=0)
    sequence = models.PositiveIntegerField(default=0, help_text="Checks requested so far.")
    next_check_at = models.DateTimeField(null=True, blank=True, help_text="Empty while a check is under way.")
    next_check_reason = models.CharField(max_length=500, blank=True)
    last_content_hash = models.CharField(max_length=64, blank=True)
    current_job = models.ForeignKey(
        "jobs.Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The recheck job of the check under way.",
    )

    created_at = models.DateTimeField(db_default=LeitstandNow())
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(
        max_length=20, blank=True, choices=[(r.value, r.value.replace("_", " ")) for r in EndReason]
    )
    end_note = models.CharField(max_length=500, blank=True)
    ended_by = models.CharField(max_length=255, blank=True)
    case_settled = models.BooleanField(default=False, help_text="The original job has followed the plan's end.")

    class Meta:
        permissions = [
            ("decide_plan", "Can end a recheck plan with a manual decision"),
            ("abort_plan", "Can abort a recheck plan"),
        ]
        indexes = [
            models.Index(fields=["next_check_at"], name="recheckplan_due_idx", condition=Q(state="active")),
            models.Index(fields=["correlation_id"], name="recheckplan_correlation_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state="active") | ~Q(end_reason=""), name="recheckplan_end_has_reason"),
        ]

    def __str__(self) -> str:
        return f"recheck plan {self.pk} ({self.state}{': ' + self.end_reason if self.end_reason else ''})"

    @property
    def policy(self) -> RecheckPolicy:
        return RecheckPolicy(
            first_delay_seconds=self.first_delay_seconds,
            min_interval_seconds=self.min_interval_seconds,
            max_interval_seconds=self.max_interval_seconds,
            widen_factor=self.widen_factor,
            early_seconds=self.early_seconds,
            jitter=self.jitter,
            confirmations_required=self.confirmations_required,
            deadline_seconds=max((self.deadline_at - self.created_at).total_seconds(), 1.0),
        )


class Observation(models.Model):
    """One check of a plan: what was seen, what the policy decided, and when the next check is and why."""

    plan = models.ForeignKey(RecheckPlan, on_delete=models.CASCADE, related_name="observations")
    sequence = models.PositiveIntegerField()
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    observed_at = models.DateTimeField(db_default=LeitstandNow())
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    final_url = models.CharField(max_length=2000, blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    match_score = models.FloatField(null=True, blank=True)
    kind = models.CharField(max_length=20, choices=[(k.value, k.value.replace("_", " ")) for k in Kind])
    detail = models.CharField(max_length=500, blank=True, help_text="The error, or what replaced the image.")
    decision = models.CharField(max_length=500)
    next_check_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["plan", "sequence"], name="observation_once_per_check")]

    def __str__(self) -> str:
        return f"check {self.sequence} of plan {self.plan_id}: {self.kind}"
