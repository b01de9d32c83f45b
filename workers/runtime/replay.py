"""Replay, dry runs and shadow runs (``manage.py replay``; docs/paths.md).

- ``replay``: a new attempt of a failed or dead job (fresh retry budget, audited by the caller).
  Final states stay final: a done or cancelled job is run again only as a dry run or a shadow run.
- ``dry_run``: the job's handler on the job's input, in this process, inside a transaction that is
  always rolled back. The safe HTTP client may read; the effect ledger and child-job creation only
  record what they *would* do (an effect already in the ledger is reported as skipped, as a real
  re-run would skip it), and every database write the handler makes (findings, candidates, outbox
  events for webhooks) is undone with the transaction. Reports the path taken and the would-be effects.
- ``shadow_run``: another handler version (``JobType.shadow_versions``) on the same input, isolated
  the same way but computing its own effects rather than reusing the ledger's; its outcome is stored
  as a ``ShadowRun`` with the differences from what the job did, never on the job.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q

from jobs.errors import Deferred, PermanentError, UnclearError, error_class_name
from jobs.models import Attempt, Effect, Job, State, StepEvent
from jobs.pathspec import EXITS, Observed, Verdict
from jobs.services import JobInputError, job_retry_now
from workers.runtime import options
from workers.runtime.context import Done, JobContext, NeedsReview, Skipped, Spawned, Stored
from workers.runtime.models import ShadowRun
from workers.runtime.pool import time_limit
from workers.runtime.registry import JobType, registry
from workers.runtime.services import job_submit, spawn_refusals

REPLAYABLE = (State.FAILED, State.DEAD)
FILTER_FIELDS = {
    "type": "type",
    "state": "state",
    "pool": "pool",
    "source": "source",
    "correlation_id": "correlation_id",
    "error_class": "error_class__icontains",
    "processing_version": "processing_version",
}


class ReplayRefused(Exception):
    pass


class ShadowDeferred(Deferred):
    """The shadow version had to wait (a busy host): try again later; nothing was recorded."""


# --- replay ------------------------------------------------------------------------------------------


def replay(job_id, *, actor: str, reason: str, user=None) -> Job:
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise ReplayRefused(f"no job {job_id}")
    if job.state in (State.DONE, State.CANCELLED):
        raise ReplayRefused(
            f"job {job_id} is {job.state}: final states stay final; run its input again without "
            "touching it with --dry-run, or another version with --shadow"
        )
    if job.state not in REPLAYABLE:
        raise ReplayRefused(f"job {job_id} is {job.state}: it has not ended, so there is nothing to replay")
    return job_retry_now(job_id=job_id, actor=actor, reason=f"replay: {reason}", user=user)


def replay_filter(spec: str):
    """``type=crawl,state=dead,error_class=Timeout`` → the jobs it names (error_class: a substring)."""
    query = Q()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not value:
            raise ReplayRefused(f"filter part {part!r} is not name=value")
        if name not in FILTER_FIELDS:
            raise ReplayRefused(f"cannot filter on {name!r}; use {', '.join(FILTER_FIELDS)}")
        if name == "state" and value not in State.values:
            raise ReplayRefused(f"state must be one of {', '.join(State.values)}")
        query &= Q(**{FILTER_FIELDS[name]: value})
    if not query:
        raise ReplayRefused("the filter names nothing")
    return Job.objects.filter(query).order_by("finished_at", "id")


# --- isolated runs -----------------------------------------------------------------------------------


class _Discard(Exception):
    """Raised at the end of an isolated run to roll its transaction back."""


@dataclass
class Recorder:
    """Stands in for the effect ledger and child-job creation during an isolated run."""

    reuse_ledger: bool  # True (dry run): an effect already applied is skipped, as a re-run would
    effects: list[dict] = field(default_factory=list)
    children: list[dict] = field(default_factory=list)

    def effect(self, key: str, apply, *, kind: str = "effect") -> Any:
        existing = Effect.objects.filter(key=key).first() if self.reuse_ledger else None
        if existing is not None:
            self.effects.append(
                {
                    "key": key,
                    "kind": kind,
                    "would": "skip: already applied",
                    "applied_by": f"{existing.job_id} attempt {existing.lease_version}",
                }
            )
            return existing.result
        value = apply()  # inside the isolated transaction: its writes are rolled back
        self.effects.append({"key": key, "kind": kind, "would": "apply", "result": _jsonable(value)})
        return value

    def spawn(self, **kwargs) -> uuid.UUID:
        # The checks the real creation makes: a dry run must refuse what the real run refuses.
        refused = spawn_refusals([kwargs], correlation_id=kwargs.get("correlation_id", ""))[0]
        self._record(kwargs, refused)
        if refused:
            field, _, message = refused.partition(": ")
            raise JobInputError(field, message)
        return uuid.uuid4()  # a stand-in: nothing was created

    def spawn_many(self, children: list[dict], **parent) -> list[Spawned]:
        refusals = spawn_refusals(children, correlation_id=parent.get("correlation_id", ""))
        results = []
        for child, refused in zip(children, refusals):
            self._record(child, refused)
            results.append(Spawned(None, created=False, refused=refused) if refused else Spawned(uuid.uuid4(), True))
        return results

    def _record(self, child: dict, refused: str) -> None:
        self.children.append(
            {
                "type": child["job_type"],
                "key": child["idempotency_key"],
                "payload": child["payload"],
                "priority": child.get("priority"),
                **({"refused": refused} if refused else {}),
            }
        )


@dataclass
class Run:
    job_type: str
    processing_version: str
    outcome: str  # done, skipped, recheck, review, failed, deferred
    detail: str
    result_ref: str
    path: Observed
    verdict: Verdict | None
    steps: list[dict]
    effects: list[dict]
    children: list[dict]
    retry_after: float | None = None  # with outcome "deferred": when to try again

    def as_dict(self) -> dict:
        return {
            "job_type": self.job_type,
            "processing_version": self.processing_version,
            "outcome": self.outcome,
            "detail": self.detail,
            "result_ref": self.result_ref,
            "path": self.path.signature,
            "conforms": None if self.verdict is None else self.verdict.conforms,
            "divergence": self.verdict.divergence if self.verdict else "",
            "steps": self.steps,
            "effects": self.effects,
            "children": self.children,
        }


def run_isolated(job: Job, job_type: JobType, handler, processing_version: str, *, reuse_ledger: bool) -> Run:
    recorder = Recorder(reuse_ledger=reuse_ledger)
    context = JobContext(
        job_id=job.id,
        job_type=job.type,
        correlation_id=job.correlation_id,
        attempt=job.attempts + 1,
        max_attempts=job.max_attempts,
        lease_version=job.lease_version,
        payload=job.payload,
        priority=job.priority,
        _spawn=recorder.spawn,
        _spawn_many=recorder.spawn_many,
        _effect=recorder.effect,
    )
    returned: Any = None
    try:
        with transaction.atomic():
            try:
                with time_limit(job_type.timeout_seconds):
                    returned = handler(context)
            except Exception as exc:  # the handler's failure is this run's outcome
                returned = exc
            raise _Discard
    except _Discard:
        pass
    outcome, detail, result_ref = _describe(returned)
    retry_after = getattr(returned, "retry_after", None) if outcome == "deferred" else None
    steps = context.take_steps()
    path = Observed(tuple((s.step, s.outcome) for s in steps), outcome if outcome in EXITS else "failed")
    verdict = job_type.paths.judge(path) if outcome in EXITS else None
    return Run(
        job.type,
        processing_version,
        outcome,
        detail[:500],
        result_ref,
        path,
        verdict,
        [
            {"step": s.step, "outcome": s.outcome, "duration_ms": round(s.duration_ms, 1), "data": _jsonable(s.data)}
            for s in steps
        ],
        recorder.effects,
        recorder.children,
        retry_after,
    )


def _describe(returned) -> tuple[str, str, str]:
    if isinstance(returned, Stored):
        return ("recheck" if returned.recheck else "done"), "result stored", returned.result_ref
    if isinstance(returned, Done):
        return "done", returned.reason or "done", returned.result_ref
    if isinstance(returned, Skipped):
        return "skipped", returned.reason, ""
    if isinstance(returned, NeedsReview):
        return "review", returned.reason, ""
    if isinstance(returned, Deferred):
        return "deferred", str(returned), ""
    if isinstance(returned, UnclearError):
        return "review", f"{error_class_name(returned)}: {returned}", ""
    if isinstance(returned, BaseException):
        return "failed", f"{error_class_name(returned)}: {returned}", ""
    return "failed", f"InvalidOutcome: handler returned {returned!r}", ""


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def dry_run(job_id) -> Run:
    job = Job.objects.get(pk=job_id)
    job_type = registry.get(job.type)
    return run_isolated(job, job_type, job_type.handler, job_type.processing_version, reuse_ledger=True)


# --- shadow runs -------------------------------------------------------------------------------------


def real_outcome(job: Job) -> dict:
    """What the job itself did, in the terms of a Run."""
    attempt = (
        Attempt.objects.filter(
            job=job, outcome__in=["completed", "skipped", "recheck_planned", "unclear", "failed", "dead"]
        )
        .order_by("-lease_version")
        .first()
    )
    path = ""
    if attempt is not None:
        steps = StepEvent.objects.filter(job=job, lease_version=attempt.lease_version).order_by("id")
        path = Observed(tuple((s.step, s.outcome) for s in steps), _exit_of(attempt)).signature
    outcome = _exit_of(attempt) if attempt else job.state
    detail = job.completion_reason or (f"{job.error_class}: {job.error_message}" if job.error_class else "")
    return {
        "outcome": outcome,
        "result_ref": job.result_ref,
        "path": path,
        "detail": detail,
        "children": Job.objects.filter(parent=job).exclude(type="shadow").count(),
    }


def _exit_of(attempt: Attempt) -> str:
    return {"completed": "done", "skipped": "skipped", "recheck_planned": "recheck", "unclear": "review"}.get(
        attempt.outcome, "failed"
    )


def shadow_run(job_id, version: str, *, actor: str, sampled: bool = False) -> tuple[ShadowRun, Run, dict]:
    job = Job.objects.get(pk=job_id)
    job_type = registry.get(job.type)
    handler = job_type.shadow_versions.get(version)
    if handler is None:
        known = ", ".join(job_type.shadow_versions) or "none"
        raise ReplayRefused(f"job type {job.type} has no shadow version {version!r}; declared: {known}")
    real = real_outcome(job)
    run = run_isolated(job, job_type, handler, version, reuse_ledger=False)
    if run.outcome == "deferred":  # e.g. the host is busy: nothing to compare yet
        raise ShadowDeferred(run.detail, retry_after=run.retry_after or 5.0)
    differences = []
    for name, shadow_value in (
        ("outcome", run.outcome),
        ("result_ref", run.result_ref),
        ("path", run.path.signature),
        ("children", len(run.children)),
    ):
        if shadow_value != real[name]:
            differences.append({"field": name, "real": real[name], "shadow": shadow_value})
    record = ShadowRun.objects.create(
        job=job,
        job_type=job.type,
        processing_version=version,
        real_version=job.processing_version,
        outcome=run.outcome,
        detail=run.detail,
        path_signature=run.path.signature[:500],
        same=not differences,
        differences=differences,
        effects=run.effects,
        children=run.children,
        sampled=sampled,
        actor=actor[:255],
    )
    return record, run, real


def shadow_sample(checked: list[tuple]) -> int:
    """For ``LEITSTAND_SHADOW_SAMPLES`` (e.g. ``{"analysis": {"version": "analysis@2-tight",
    "share": 0.05}}``): a ``shadow`` job in the bulk lane for that share of the type's completed
    attempts, chosen by the job ID's hash (the same job is always in or out)."""
    samples = options.current().shadow_samples
    made = 0
    for job_id, job_type, exit in checked:
        sample = samples.get(job_type)
        if not sample or exit not in ("done", "skipped", "recheck", "review"):
            continue
        if int(hashlib.sha256(str(job_id).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF >= sample["share"]:
            continue
        job_submit(  # in the pool of the job it shadows, in the bulk lane (the type's)
            job_type="shadow",
            idempotency_key=f"shadow:{job_id}:{sample['version']}",
            payload={"job_id": str(job_id), "version": sample["version"], "pool": registry.get(job_type).pool},
            actor="shadow-sampler",
            parent_id=job_id,
        )
        made += 1
    return made


def handle_shadow(context: JobContext):
    """The ``shadow`` job type: one sampled shadow run."""
    job_id, version = context.payload.get("job_id"), context.payload.get("version")
    if not isinstance(job_id, str) or not isinstance(version, str):
        raise PermanentError('the shadow payload is {"job_id": "<uuid>", "version": "<processing version>"}')
    with context.step("shadow", version=version) as info:
        try:
            record, run, _ = shadow_run(job_id, version, actor=f"shadow-job:{context.job_id}", sampled=True)
        except (ReplayRefused, Job.DoesNotExist) as exc:
            raise PermanentError(str(exc)) from None
        # ShadowDeferred goes up: the engine releases this job and it runs again later.
        info.update(shadow_run=record.pk, same=record.same, outcome=run.outcome)
    return Done(
        reason=f"shadow {version}: {'same as the job' if record.same else 'different: ' + ', '.join(d['field'] for d in record.differences)}"
    )
