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
from dataclasses import dataclass, replace

from jobs.errors import JobError, PermanentError
from rechecks import options, services
from rechecks.models import RecheckPlan
from workers.pipeline import analysis, images
from workers.pipeline.fetching import SecondOpinion, fetch_politely
from workers.pipeline.http import IMAGE_TYPES, ResponseRefused, check_content
from workers.runtime.context import Done, JobContext, Skipped
from workers.runtime.pool import JobTimeout

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
    looks: dict[int, _Look] = {}

    def looked_at(result) -> _Look:
        if id(result) not in looks:
            looks[id(result)] = _look(result, plan)
        return looks[id(result)]

    def shows_removal(result) -> bool:
        """What could confirm the removal (``policy.confirms``): gone, or a 2xx that is not the copy.
        A 429, 5xx or 403 is no removal: asking again at once would only add to a site's load."""
        if result.status in (404, 410):
            return True
        return 200 <= result.status < 300 and not looked_at(result).is_the_copy

    agent = options.current().second_opinion_agent
    try:
        fetched = fetch_politely(
            context,
            plan.url,
            accept=None,
            raise_for_status=False,
            # Every answer that would confirm the removal (gone, or no longer the image: a soft 404,
            # a placeholder, a redirect home) is asked again as a browser would ask.
            second_opinion=SecondOpinion(agent, shows_removal, lambda result: looked_at(result).matches)
            if agent
            else None,
        )
    except JobTimeout:
        raise  # the job's own time ran out: a retry, never an observation
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
        look = looked_at(result)
        if look.error is not None:
            raise look.error  # not the site's doing (an original without its fingerprint): the job's failure
        if look.timed_out:
            # The image could not be judged in time: no answer, never "replaced".
            info.update(timed_out=look.replaced)
            return replace(observed, status=None, detail=look.replaced)
        if look.replaced:
            info.update(replaced=look.replaced)
            return replace(observed, detail=f"no longer the image: {look.replaced}")
        info.update(score=round(look.score, 4), asset_id=plan.asset_id)
    return replace(observed, score=look.score)


@dataclass(frozen=True)
class _Look:
    """What an answer shows: the copy's score against the plan's original, or why it is no image."""

    score: float | None = None
    replaced: str = ""
    timed_out: bool = False
    match_at: float = 1.0
    error: JobError | None = None  # the comparison itself failed: raised in the compare step

    @property
    def matches(self) -> bool:
        """The answer is the copy, judged: an image that still matches the plan's original."""
        return self.score is not None and self.score >= self.match_at

    @property
    def is_the_copy(self) -> bool:
        """Whether the answer shows the copy; an answer that could not be judged counts as showing
        it (no second request for it, and no removal confirmed by it)."""
        return self.timed_out or self.error is not None or self.matches


def _look(result, plan: RecheckPlan) -> _Look:
    if not 200 <= result.status < 300:
        return _Look(replaced=f"answered {result.status}")
    try:
        check_content(result.headers, result.body, IMAGE_TYPES, result.final_url)
        decoded = images.decode(result.body)
    except images.DecodeTimedOut as slow:
        return _Look(replaced=str(slow), timed_out=True)
    except (ResponseRefused, images.ImageRefused) as replaced:
        return _Look(replaced=str(replaced))
    match_at = analysis.version_spec(analysis.running_version())[1]["match_at"]
    try:
        score = analysis.score_against(decoded, plan.asset)
    except JobError as failed:  # judged outside the fetch: the host is not at fault
        return _Look(error=failed)
    return _Look(score=score, match_at=match_at)
