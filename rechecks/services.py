"""Services of the rechecks app: plans are requested, dispatched, observed and ended only here.

- ``plan_request``: the analysis handler asks for a plan when it reports a match (in the same
  transaction as the finding);
- ``case_settle``: an ended plan's original job follows it (the *case*; the planner sweep,
  ``rechecks/planner_sweep.py``, calls it and creates the recheck jobs of due plans);
- ``observation_record``: the recheck handler stores what it saw; the policy decides what follows;
- ``plan_decide`` / ``plan_abort``: a person ends a plan, with a reason (audited on the plan and in
  the original job's transition log).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django_fsm import TransitionNotAllowed

from jobs import leases
from jobs.models import TERMINAL_STATES, Job, LeitstandNow, State, database_now
from jobs.services import JobInputError
from jobs.webhooks import event_record
from rechecks import options, policy
from rechecks.models import Observation, RecheckPlan
from rechecks.policy import EndReason, Progress, Target
from workers.pipeline.analysis import running_version, version_spec

PLANNER = "recheck-planner"
logger = logging.getLogger("leitstand.rechecks")
_rng = random.SystemRandom()


def plan_request(*, job: Job, finding, content_hash: str) -> RecheckPlan:
    """A plan for a reported match (idempotent per job): first check after the first delay."""
    existing = RecheckPlan.objects.filter(job=job).first()
    if existing:
        return existing
    target, rules = options.current().target, options.current().policy
    now = database_now()
    deadline_at = now + timedelta(seconds=rules.deadline_seconds)
    next_at, reason = policy.first_check(rules, now=now, deadline_at=deadline_at, rng=_rng)
    return RecheckPlan.objects.create(
        job=job,
        finding=finding,
        asset_id=finding.asset_id,
        correlation_id=job.correlation_id,
        url=finding.candidate.image_url,
        target=target,
        first_delay_seconds=rules.first_delay_seconds,
        min_interval_seconds=rules.min_interval_seconds,
        max_interval_seconds=rules.max_interval_seconds,
        widen_factor=rules.widen_factor,
        early_seconds=rules.early_seconds,
        jitter=rules.jitter,
        confirmations_required=rules.confirmations_required,
        deadline_at=deadline_at,
        created_at=now,
        interval_seconds=rules.min_interval_seconds,
        next_check_at=next_at,
        next_check_reason=reason,
        last_content_hash=content_hash,
    )


# --- the planner (control process) -----------------------------------------------------------------


def case_settle(plan_id: int) -> bool:
    """Make the original job follow its ended plan; idempotent. False while the job cannot follow yet
    (e.g. the analysis job is still finishing: the next sweep tries again)."""
    with transaction.atomic():
        plan = RecheckPlan.objects.select_for_update().select_related("job").get(pk=plan_id)
        if plan.case_settled:
            return False
        job, why = plan.job, f"recheck plan {plan.pk}: {plan.end_note}"[:500]
        try:
            if job.state in TERMINAL_STATES:
                pass  # already ended elsewhere: nothing to follow
            elif plan.end_reason == EndReason.DEADLINE_PASSED:
                if leases.review_queue_job(job.id, actor=PLANNER, cause=why) is None:
                    return False
            elif plan.end_reason == EndReason.ABORTED:
                leases.transition_apply(job.id, "cancel", actor=plan.ended_by, cause=why, reason=why)
            elif job.state == State.READY_FOR_REVIEW:
                leases.transition_apply(job.id, "decide", actor=plan.ended_by, cause=why, reason=why)
            elif job.state == State.RECHECK_DUE:
                leases.transition_apply(job.id, "confirm", actor=plan.ended_by, cause=why, reason=why)
            else:
                return False
        except TransitionNotAllowed:
            return False
        plan.case_settled = True
        plan.save(update_fields=["case_settled"])
        return True


def plan_end(plan: RecheckPlan, reason: EndReason, *, by: str, note: str) -> None:
    plan.state, plan.end_reason, plan.ended_by = RecheckPlan.State.ENDED, reason, by[:255]
    plan.end_note, plan.ended_at, plan.next_check_at, plan.next_check_reason = note[:500], LeitstandNow(), None, ""
    plan.save(
        update_fields=["state", "end_reason", "ended_by", "end_note", "ended_at", "next_check_at", "next_check_reason"]
    )
    plan.refresh_from_db(fields=["ended_at"])
    event_record(
        kind="recheck_plan.ended",
        job_id=plan.job_id,
        data={
            "id": plan.pk,
            "end_reason": plan.end_reason,
            "ended_by": plan.ended_by,
            "note": plan.end_note,
            "ended_at": plan.ended_at.isoformat(),
            "checks": plan.sequence,
            "url": plan.url,
        },
    )


# --- observations (recheck handler) ---------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """The raw facts of one check; ``status`` None: no answer (``detail`` says why)."""

    status: int | None
    final_url: str = ""
    content_hash: str = ""
    score: float | None = None
    redirected: bool = False
    detail: str = ""


class CheckSuperseded(Exception):
    """The plan ended or moved on to a later check: this observation has nothing to decide."""


def observation_record(*, plan_id: int, sequence: int, job_id, observed: Observed) -> Observation:
    with transaction.atomic():
        plan = RecheckPlan.objects.select_for_update().get(pk=plan_id)
        if plan.state != RecheckPlan.State.ACTIVE:
            raise CheckSuperseded(f"plan {plan.pk} ended ({plan.end_reason}) before check {sequence} was decided")
        if plan.sequence != sequence:
            raise CheckSuperseded(f"plan {plan.pk} is at check {plan.sequence}, not {sequence}")
        kind = policy.classify(
            status=observed.status,
            score=observed.score,
            content_hash=observed.content_hash,
            last_hash=plan.last_content_hash,
            redirected=observed.redirected,
            match_at=version_spec(running_version())[1]["match_at"],  # the bands the copy was found with
        )
        progress = Progress(plan.interval_seconds, plan.unchanged_count, plan.confirmations)
        decision = policy.decide(
            plan.policy, Target(plan.target), progress, kind, now=database_now(), deadline_at=plan.deadline_at, rng=_rng
        )
        observation = Observation.objects.create(
            plan=plan,
            sequence=sequence,
            job_id=job_id,
            http_status=observed.status,
            final_url=observed.final_url[:2000],
            content_hash=observed.content_hash,
            match_score=observed.score,
            kind=kind,
            detail=observed.detail[:500],
            decision=decision.reason[:500],
            next_check_at=decision.next_check_at,
        )
        plan.interval_seconds = decision.progress.interval_seconds
        plan.unchanged_count = decision.progress.unchanged_count
        plan.confirmations = decision.progress.confirmations
        plan.current_job = None
        if observed.content_hash:
            plan.last_content_hash = observed.content_hash
        if decision.end is None:
            plan.next_check_at, plan.next_check_reason = decision.next_check_at, decision.reason[:500]
            plan.save()
        else:
            plan.save()
            plan_end(plan, decision.end, by=PLANNER, note=decision.reason)
    if decision.end is not None:
        case_settle(plan.pk)
    return observation


# --- people end plans -----------------------------------------------------------------------------


def plan_decide(*, plan_id: int, actor: str, reason: str, user=None) -> RecheckPlan:
    """End the plan with a manual decision; the case is confirmed (or decided, if under review)."""
    return _end_by_person(plan_id, actor, reason, user, "rechecks.decide_plan", EndReason.MANUAL_DECISION)


def plan_abort(*, plan_id: int, actor: str, reason: str, user=None) -> RecheckPlan:
    """Abort the plan with a documented reason; the case is cancelled with that reason."""
    return _end_by_person(plan_id, actor, reason, user, "rechecks.abort_plan", EndReason.ABORTED)


def _end_by_person(plan_id, actor: str, reason: str, user, permission: str, end: EndReason) -> RecheckPlan:
    if not isinstance(reason, str) or not reason.strip():
        raise JobInputError("reason", "is required: say why the plan ends")
    if len(reason) > 400 or "\x00" in reason:
        raise JobInputError("reason", "must be at most 400 characters without NUL")
    if user is not None and not user.has_perm(permission):
        raise PermissionDenied(f"{user} lacks the permission {permission}")
    with transaction.atomic():
        try:
            plan = RecheckPlan.objects.select_for_update().get(pk=plan_id)
        except (RecheckPlan.DoesNotExist, ValueError):
            raise JobInputError("plan", f"recheck plan {plan_id} does not exist") from None
        if plan.state != RecheckPlan.State.ACTIVE:
            raise JobInputError(
                "plan", f"recheck plan {plan.pk} has already ended ({plan.end_reason}: {plan.end_note})"
            )
        verb = "manual decision" if end == EndReason.MANUAL_DECISION else "aborted"
        plan_end(plan, end, by=actor, note=f"{verb} by {actor}: {reason.strip()}")
    case_settle(plan.pk)
    plan.refresh_from_db()
    return plan
