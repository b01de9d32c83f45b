"""The ``recheck-planner`` sweep, every round of the control process: recheck jobs for due plans
(idempotent per plan and check number), checks whose job ended without observing planned again,
plans whose case ended elsewhere ended, and each ended plan's original job made to follow (the
*case*, ``services.case_settle``). One plan that cannot start its check is recorded on it and tried
again later; the others go on. Each part takes at most ``LEITSTAND_RECHECK_PLANS_PER_ROUND`` plans."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef

from jobs.models import TERMINAL_STATES, LeitstandNow, database_now
from rechecks import options, policy
from rechecks.models import Observation, RecheckPlan
from rechecks.policy import EndReason
from rechecks.services import PLANNER, case_settle, plan_end
from workers.runtime.services import job_submit
from workers.runtime.sweeps import Stage, register_unit, require

logger = logging.getLogger("leitstand.rechecks")


@dataclass(frozen=True)
class PlannerConfig:
    plans_per_round: int
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require(
            isinstance(self.plans_per_round, int) and self.plans_per_round >= 1,
            "LEITSTAND_RECHECK_PLANS_PER_ROUND",
            f"must be a whole number of at least 1, not {self.plans_per_round!r}",
        )

    @classmethod
    def from_options(cls, rechecks: options.RecheckOptions) -> PlannerConfig:
        return cls(plans_per_round=rechecks.plans_per_round)


@dataclass
class PlannerReport:
    dispatched: int = 0
    retried: int = 0
    ended_elsewhere: int = 0
    cases_settled: int = 0


def run_once(config: PlannerConfig) -> PlannerReport:
    """One round; each of its four parts takes at most ``plans_per_round`` plans."""
    limit = config.plans_per_round
    return PlannerReport(
        dispatched=_dispatch_due(limit),
        retried=_retry_lost_checks(limit),
        ended_elsewhere=_end_where_the_case_ended(limit),
        cases_settled=_settle_cases(limit),
    )


def _dispatch_due(limit: int) -> int:
    with transaction.atomic():
        due = list(
            RecheckPlan.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("job")
            .filter(state=RecheckPlan.State.ACTIVE, next_check_at__lte=LeitstandNow())
            .order_by("next_check_at")[:limit]
        )
        dispatched = 0
        for plan in due:
            try:
                with transaction.atomic():  # one plan that cannot start its check does not stop the others
                    _check_start(plan)
                dispatched += 1
            except Exception as failed:
                logger.exception("recheck plan %s could not start its next check; trying again later", plan.pk)
                plan.refresh_from_db()
                plan.next_check_at = database_now() + timedelta(seconds=plan.early_seconds)
                plan.next_check_reason = f"could not start check {plan.sequence + 1}: {failed}"[:500]
                plan.save(update_fields=["next_check_at", "next_check_reason"])
    return dispatched


def _check_start(plan: RecheckPlan) -> None:
    sequence = plan.sequence + 1
    submission = job_submit(
        job_type="recheck",
        payload={"plan_id": plan.id, "sequence": sequence},
        idempotency_key=f"plan-{plan.id}:{sequence}",
        actor=PLANNER,
        correlation_id=plan.correlation_id,
        parent_id=plan.job_id,
        source=plan.job.source,
    )
    plan.sequence, plan.current_job, plan.next_check_at = sequence, submission.job, None
    plan.save(update_fields=["sequence", "current_job", "next_check_at"])


def _retry_lost_checks(limit: int) -> int:
    """A check whose recheck job ended (dead, cancelled) without an observation is planned again."""
    observed = Observation.objects.filter(plan=OuterRef("pk"), sequence=OuterRef("sequence"))
    with transaction.atomic():
        lost = list(
            RecheckPlan.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("current_job")
            .filter(state=RecheckPlan.State.ACTIVE, next_check_at__isnull=True, current_job__state__in=TERMINAL_STATES)
            .exclude(Exists(observed))[:limit]
        )
        now = database_now()
        for plan in lost:
            job = plan.current_job
            next_at = min(now + timedelta(seconds=plan.early_seconds), plan.deadline_at)
            plan.next_check_at = next_at
            plan.next_check_reason = (
                f"check {plan.sequence} ended {job.state} without an observation "
                f"({job.error_class or job.completion_reason or 'no reason'}); "
                f"trying again in {policy.duration(plan.early_seconds)}"
            )[:500]
            plan.current_job = None
            plan.save(update_fields=["next_check_at", "next_check_reason", "current_job"])
    return len(lost)


def _end_where_the_case_ended(limit: int) -> int:
    """The original job ended elsewhere (cancelled, decided): the plan has nothing left to follow."""
    with transaction.atomic():
        orphans = list(
            RecheckPlan.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("job")
            .filter(state=RecheckPlan.State.ACTIVE, job__state__in=TERMINAL_STATES)[:limit]
        )
        for plan in orphans:
            plan_end(
                plan,
                EndReason.ABORTED,
                by=PLANNER,
                note=f"the case ended elsewhere: job {plan.job.state} ({plan.job.completion_reason or 'no reason'})",
            )
            plan.case_settled = True
            plan.save(update_fields=["case_settled"])
    return len(orphans)


def _settle_cases(limit: int) -> int:
    pending = list(
        RecheckPlan.objects.filter(state=RecheckPlan.State.ENDED, case_settled=False).values_list("pk", flat=True)[
            :limit
        ]
    )
    return sum(case_settle(plan_id) for plan_id in pending)


def register() -> None:
    register_unit("recheck-planner", run_once, PlannerConfig.from_options(options.current()), stage=Stage.PLAN)
