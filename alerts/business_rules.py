"""Business rules across jobs: invariants no single job can check, declared here and evaluated by
the control process (every ``LEITSTAND_BUSINESS_RULES_SECONDS``). Each rule returns the subjects
that break it now; ``rules_evaluate`` keeps one open ``RuleViolation`` per (rule, subject), resolves
those no longer found, and the alert rule ``business_rule_violated`` fires on open violations.

A rule's query is bounded (``LIMIT``) and looks only at recent rows, so evaluation stays cheap at
millions of jobs; a subject older than the look-back is not judged any more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from alerts import options
from alerts.models import RuleViolation
from jobs.display import ago
from jobs.models import TERMINAL_STATES, Job, State, Transition, database_now
from rechecks.models import RecheckPlan
from workers.pipeline.models import Finding

LIMIT = 1000
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Broken:
    subject: str
    job_id: object
    detail: str


@dataclass(frozen=True)
class BusinessRule:
    name: str
    title: str
    check: Callable[[datetime, dict], list[Broken]]


def _match_has_plan(now: datetime, options: dict) -> list[Broken]:
    within = timedelta(seconds=options["within_seconds"])
    findings = (
        Finding.objects.filter(
            verdict=Finding.Verdict.MATCH,
            created_at__lt=now - within,
            created_at__gte=now - within - timedelta(days=options["look_back_days"]),
        )
        .filter(~Exists(RecheckPlan.objects.filter(Q(finding=OuterRef("pk")) | Q(job=OuterRef("job_id")))))
        .order_by("created_at")[:LIMIT]
    )
    return [
        Broken(
            f"finding {f.pk}",
            f.job_id,
            f"match on candidate {f.candidate_id} found "
            f"{ago((now - f.created_at).total_seconds())} ago; no recheck plan "
            f"after {ago(within.total_seconds())}",
        )
        for f in findings
    ]


def _crawl_children_end(now: datetime, options: dict) -> list[Broken]:
    within = timedelta(seconds=options["within_seconds"])
    open_child = Job.objects.filter(parent=OuterRef("pk")).exclude(state__in=TERMINAL_STATES)
    crawls = (
        Job.objects.filter(
            type="crawl",
            state=State.DONE,
            finished_at__lt=now - within,
            finished_at__gte=now - within - timedelta(days=options["look_back_days"]),
        )
        .filter(Exists(open_child))
        .order_by("finished_at")[:LIMIT]
    )
    broken = []
    for crawl in crawls:
        waiting = list(
            Job.objects.filter(parent=crawl).exclude(state__in=TERMINAL_STATES).values_list("state", flat=True)[:50]
        )
        states = ", ".join(sorted({s for s in waiting}))
        broken.append(
            Broken(
                f"job {crawl.pk}",
                crawl.pk,
                f"crawl ended {ago((now - crawl.finished_at).total_seconds())} "
                f"ago; {len(waiting)}{'+' if len(waiting) == 50 else ''} children "
                f"not ended yet ({states})",
            )
        )
    return broken


def _decision_ends_the_job(now: datetime, options: dict) -> list[Broken]:
    within = timedelta(seconds=options["within_seconds"])
    decisions = (
        Transition.objects.filter(
            from_state=State.READY_FOR_REVIEW,
            at__lt=now - within,
            at__gte=now - within - timedelta(days=options["look_back_days"]),
        )
        .select_related("job")
        .order_by("at")[: LIMIT * 5]
    )
    broken, seen = [], set()
    for decision in decisions:
        job = decision.job
        if job.pk in seen or job.state in TERMINAL_STATES:
            continue
        seen.add(job.pk)
        if (
            job.state == State.RECHECK_DUE
            and RecheckPlan.objects.filter(job=job, state=RecheckPlan.State.ACTIVE).exists()
        ):
            continue  # a match decision: the recheck plan leads to the end
        if job.state == State.READY_FOR_REVIEW and job.state_changed_at > decision.at:
            continue  # back in review by a later path (a plan's deadline): a new case, not this decision's
        broken.append(
            Broken(
                f"job {job.pk}",
                job.pk,
                f"decided by {decision.actor} {ago((now - decision.at).total_seconds())} "
                f"ago ({decision.from_state} → {decision.to_state}); the job is "
                f"{job.state}, neither ended nor followed by a recheck plan",
            )
        )
        if len(broken) >= LIMIT:
            break
    return broken


RULES = {
    rule.name: rule
    for rule in (
        BusinessRule("match_has_plan", "Every match finding gets a recheck plan", _match_has_plan),
        BusinessRule("crawl_children_end", "Every crawl job's children end in time", _crawl_children_end),
        BusinessRule(
            "decision_ends_the_job", "Every review decision is followed by the job's end", _decision_ends_the_job
        ),
    )
}


def rules_evaluate(*, now: datetime | None = None) -> dict:
    """Evaluate every rule; open new violations, refresh the ones still found, resolve the rest."""
    now = now or database_now()
    report = {}
    for rule in RULES.values():
        try:
            report[rule.name] = _rule_check(rule, now)
        except Exception as failed:
            # One rule that cannot be checked is logged and reported; every other rule is checked.
            logger.exception("business rule %s could not be checked this round", rule.name)
            report[rule.name] = {"failed": f"{type(failed).__name__}: {failed}"[:500]}
    return report


def _rule_check(rule, now: datetime) -> dict:
    """One rule checked and its violations brought in line, in a savepoint of its own."""
    with transaction.atomic():
        found = {b.subject: b for b in rule.check(now, options.current().business_rules[rule.name])}
        open_ = {
            v.subject: v
            for v in RuleViolation.objects.select_for_update().filter(rule=rule.name, resolved_at__isnull=True)
        }
        new = [
            RuleViolation(
                rule=rule.name, subject=s, job_id=b.job_id, detail=b.detail[:500], first_seen=now, last_seen=now
            )
            for s, b in found.items()
            if s not in open_
        ]
        RuleViolation.objects.bulk_create(new)
        still = [v for s, v in open_.items() if s in found]
        for violation in still:
            violation.last_seen, violation.detail = now, found[violation.subject].detail[:500]
        RuleViolation.objects.bulk_update(still, ["last_seen", "detail"])
        resolved = RuleViolation.objects.filter(pk__in=[v.pk for s, v in open_.items() if s not in found]).update(
            resolved_at=now
        )
    return {"open": len(found), "new": len(new), "resolved": resolved}
