"""The recheck handler (pool ``recheck``): check a reported copy again and let the policy decide.

Payload ``{"plan_id": int, "sequence": int}`` — one job per plan and check number, created by the
planner. Steps: ``plan`` (is this check still wanted?), ``robots`` and ``fetch`` (through the safe
client, robots.txt and politeness apply; every status is an answer here, a 404 above all),
``compare`` (the content against the plan's protected asset, with the analysis comparison), and
``decide`` (the observation is stored and the policy decides — at most once per check, through the
effect ledger). The job itself ends ``done`` with the decision as its reason.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from django.conf import settings

from jobs.errors import JobError, PermanentError
from rechecks import services
from rechecks.models import RecheckPlan
from workers.pipeline import analysis, images
from workers.pipeline.fetching import fetch_politely
from workers.pipeline.http import IMAGE_TYPES, ResponseRefused, check_content
from workers.runtime.context import Done, JobContext, Skipped

PROCESSING_VERSION = "recheck@1"


def subject(payload: dict) -> str:
    """A recheck is about its plan (every check of one plan shares the prefix)."""
    return f"recheck plan {payload.get('plan_id')}" if payload.get("plan_id") else ""


def parse(payload: dict) -> tuple[int, int]:
    if set(payload) != {"plan_id", "sequence"}:
        raise PermanentError('the recheck payload is exactly {"plan_id": <int>, "sequence": <int>}')
    values = payload["plan_id"], payload["sequence"]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise PermanentError("payload.plan_id and payload.sequence must be positive integers")
    return values


def handle(context: JobContext):
    plan_id, sequence = parse(context.payload)
    with context.step("plan", plan_id=plan_id, sequence=sequence) as info:
        plan = RecheckPlan.objects.select_related("asset").filter(pk=plan_id).first()
        if plan is None:
            raise PermanentError(f"recheck plan {plan_id} does not exist")
        if plan.state != RecheckPlan.State.ACTIVE or plan.sequence != sequence:
            info["skipped"] = True
            why = (
                f"plan {plan_id} ended ({plan.end_reason})"
                if plan.state != RecheckPlan.State.ACTIVE
                else f"plan {plan_id} moved on to check {plan.sequence}"
            )
            return Skipped(why)
    observed = observe(context, plan)
    with context.step("decide") as info:
        try:
            recorded = context.effect(
                f"observation:{plan_id}:{sequence}",
                kind="observation",
                apply=lambda: _record(plan_id, sequence, context, observed),
            )
        except services.CheckSuperseded as superseded:
            info["skipped"] = True
            return Skipped(str(superseded))
        info.update(recorded)
    return Done(
        reason=f"check {sequence}: {recorded['kind']}; {recorded['decision']}"[:500],
        result_ref=f"observation:{recorded['observation_id']}",
        result_checksum=observed.content_hash,
    )


def _record(plan_id: int, sequence: int, context: JobContext, observed: services.Observed) -> dict:
    observation = services.observation_record(
        plan_id=plan_id, sequence=sequence, job_id=context.job_id, observed=observed
    )
    return {"observation_id": observation.pk, "kind": observation.kind, "decision": observation.decision}


def observe(context: JobContext, plan: RecheckPlan) -> services.Observed:
    try:
        fetched = fetch_politely(
            context,
            plan.url,
            accept=None,
            raise_for_status=False,
            second_opinion_agent=settings.LEITSTAND_RECHECK_SECOND_OPINION_AGENT,
        )
    except JobError as exc:  # no answer: timeout, connection refused, refused address, over-limit body
        return services.Observed(status=None, detail=f"{type(exc).__name__}: {exc}")
    if fetched.result is None:
        return services.Observed(status=None, detail=fetched.robots.reason)
    result = fetched.result
    content_hash = hashlib.sha256(result.body).hexdigest() if 200 <= result.status < 300 else ""
    observed = services.Observed(
        status=result.status,
        final_url=result.final_url,
        content_hash=content_hash,
        redirected=bool(result.redirects),
        detail=(
            f"the site answered LeitstandBot {fetched.answered_the_crawler}, a browser {result.status}"
            if fetched.answered_the_crawler
            else ""
        ),
    )
    if not 200 <= result.status < 300:
        return observed
    with context.step("compare") as info:
        try:
            check_content(result.headers, result.body, IMAGE_TYPES, result.final_url)
            decoded = images.decode(result.body)
        except (ResponseRefused, images.ImageRefused) as replaced:
            info.update(replaced=str(replaced))
            return replace(observed, detail=f"no longer the image: {replaced}")
        score = analysis.score_against(decoded, plan.asset)
        info.update(score=round(score, 4), asset_id=plan.asset_id)
    return replace(observed, score=score)
