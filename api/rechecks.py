"""The recheck-plan resource: read a plan with its observations, end it with a manual decision."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.http import Http404
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from api.auth import owned, require
from api.fields import Text
from jobs.services import JobInputError
from rechecks.models import RecheckPlan
from rechecks.services import plan_decide

router = Router(tags=["rechecks"])


class ObservationOut(Schema):
    sequence: int
    observed_at: datetime
    http_status: int | None
    kind: str
    match_score: float | None
    content_hash: str
    decision: str
    next_check_at: datetime | None


class RecheckPlanOut(Schema):
    id: int
    job_id: uuid.UUID
    correlation_id: str
    url: str
    target: str
    state: str
    sequence: int
    next_check_at: datetime | None
    next_check_reason: str
    deadline_at: datetime
    end_reason: str
    end_note: str
    ended_by: str
    ended_at: datetime | None
    observations: list[ObservationOut] = []


class DecisionIn(Schema):
    reason: Text = Field(min_length=1, max_length=400)


def plan_out(plan: RecheckPlan) -> dict:
    data = {field: getattr(plan, field) for field in RecheckPlanOut.model_fields if field != "observations"}
    data["id"] = plan.pk
    data["observations"] = list(plan.observations.order_by("sequence").values(*ObservationOut.model_fields))
    return data


@router.get("/rechecks/{plan_id}", response=RecheckPlanOut, summary="Read a recheck plan")
def rechecks_get(request, plan_id: int):
    """A recheck plan of this client's job: its target, state, next check, deadline, how it ended, and
    every observation so far."""
    require(request, "jobs:read")
    plan = owned(request, RecheckPlan.objects, path="job__client").filter(pk=plan_id).first()
    if plan is None:
        raise Http404(f"no recheck plan {plan_id}")
    return plan_out(plan)


@router.post("/rechecks/{plan_id}/decision", response=RecheckPlanOut, summary="End a recheck plan with a decision")
def rechecks_decide(request, plan_id: int, body: DecisionIn):
    """End a recheck plan with a manual decision (the case is confirmed); 409 once the plan ended."""
    require(request, "reviews:write")
    if not owned(request, RecheckPlan.objects, path="job__client").filter(pk=plan_id).exists():
        raise Http404(f"no recheck plan {plan_id}")
    try:
        plan = plan_decide(plan_id=plan_id, actor=f"api:{request.auth.name}", reason=body.reason)
    except JobInputError as refused:
        if refused.field == "plan":
            raise HttpError(409, refused.message) from None
        raise
    return plan_out(plan)
