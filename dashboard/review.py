"""The reviewer workspace's service: the queue, holding a case, the evidence, and the decision.

A decision is one FSM transition with the reviewer's permission (``jobs.services.review_decide``):
*match* sends the case to rechecks (``decide_match`` → ``recheck_due``, with a recheck plan),
*no match* ends it (``decide`` → ``done``), *escalate* hands it to the escalated queue, *skip* gives
it back. The finding records the reviewer's verdict.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from dashboard import options as console_options
from jobs import services as job_services
from jobs.models import Job, LeitstandNow, ReviewEscalation, ReviewLease, State
from jobs.selectors import short_id as id_short
from jobs.services import JobInputError
from workers.pipeline.services import finding_review_record
from workers.runtime.hooks import match_report

VERDICTS = ("match", "no_match", "escalate", "skip")


def queue(*, escalated: bool, limit: int) -> list[dict]:
    jobs = (
        Job.objects.filter(state=State.READY_FOR_REVIEW, review_escalation__isnull=not escalated)
        .select_related("review_lease")
        .order_by("state_changed_at", "id")[:limit]
    )
    now_leases = {
        lease.job_id: lease
        for lease in ReviewLease.objects.filter(job__in=[j.id for j in jobs], expires_at__gt=LeitstandNow())
    }
    return [{"job": job, "lease": now_leases.get(job.id)} for job in jobs]


def take(*, reviewer: str, escalated: bool = False, job_id=None) -> Job | None:
    return job_services.review_take(
        reviewer=reviewer,
        seconds=console_options.current().review_lease_seconds,
        job_id=job_id,
        escalated=escalated,
    )


def holder(job: Job) -> ReviewLease | None:
    return ReviewLease.objects.filter(job=job, expires_at__gt=LeitstandNow()).first()


def escalated_by(job: Job) -> str:
    """Who escalated the case ('' when it is not escalated)."""
    return ReviewEscalation.objects.filter(job=job).values_list("escalated_by", flat=True).first() or ""


def case(job: Job) -> dict:
    """The evidence of a case: the finding (scores, hashes, URLs), both images, the job's history."""
    finding = job.findings.select_related("candidate__source", "asset").order_by("-created_at").first()
    return {
        "finding": finding,
        "candidate_thumbnail": finding.thumbnail if finding else None,
        "asset_image": finding.asset.image if finding and finding.asset else None,
        "asset_size": [finding.asset.width, finding.asset.height] if finding and finding.asset else None,
        "escalation": ReviewEscalation.objects.filter(job=job).first(),
        # Decisions and review events; the engine's claims and releases stay on the job page.
        "transitions": list(
            job.transitions.filter(Q(to_state__in=REVIEW_HISTORY) | Q(from_state=State.READY_FOR_REVIEW)).order_by("id")
        ),
        "position": queue_position(job),
    }


# The states a case's history shows (how it came to review and how it left it).
REVIEW_HISTORY = (State.UNCLEAR, State.READY_FOR_REVIEW, State.DONE, State.RECHECK_DUE, State.CANCELLED, State.DEAD)


def queue_position(job: Job) -> tuple[int, int] | None:
    """(n, N): the case is the n-th oldest of the N open cases (None when it is not open)."""
    if job.state != State.READY_FOR_REVIEW:
        return None
    open_cases = Job.objects.filter(state=State.READY_FOR_REVIEW)
    older = open_cases.filter(
        Q(state_changed_at__lt=job.state_changed_at) | Q(state_changed_at=job.state_changed_at, id__lt=job.id)
    )
    return older.count() + 1, open_cases.count()


def decide(*, job_id, verdict: str, reason: str, actor: str, user) -> str:
    if verdict not in VERDICTS:
        raise JobInputError("verdict", f"must be one of {', '.join(VERDICTS)}")
    if verdict == "skip":
        job_services.review_release(job_id=job_id, reviewer=actor)
        return f"case {id_short(job_id)} skipped: back in the queue"
    if verdict == "escalate":
        job_services.review_escalate(job_id=job_id, actor=actor, reason=reason, user=user)
        return f"case {id_short(job_id)} escalated"
    with transaction.atomic():
        is_match = verdict == "match"
        job = job_services.review_decide(
            job_id=job_id, actor=actor, reason=f"{verdict}: {reason}" if reason else "", user=user, is_match=is_match
        )
        finding = finding_review_record(job_id=job.id, verdict=verdict, reviewer=actor, reason=reason)
        if is_match and finding is not None:
            match_report(sender="review", job=job, finding=finding, content_hash=finding.candidate.content_hash)
    return f"case {id_short(job_id)} decided: {verdict.replace('_', ' ')}"
