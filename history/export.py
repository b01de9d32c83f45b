"""One JSON document with everything about a job, for post-mortems, audits and the archive
(``manage.py export_job JOB_ID``, the job page's *Export JSON*, and every line of an archive file).

``jobs_export`` builds the documents of many jobs with one query per table, so the archive writes a
file of hundreds of jobs in a few dozen queries; ``job_export`` is the document of one.
"""

from __future__ import annotations

import json
from collections import defaultdict

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import BinaryField
from django.utils import timezone

from jobs.models import Attempt, AuditEntry, Effect, Job, ReviewEscalation, StaleWrite, State, StepEvent, Transition
from rechecks.models import Observation, RecheckPlan
from workers.pipeline.models import Finding
from workers.runtime.models import ShadowRun

FORMAT = "leitstand.job-export/1"


def _rows(queryset, *, exclude=()) -> list[dict]:
    fields = [
        f.attname
        for f in queryset.model._meta.concrete_fields
        if f.name not in exclude and not isinstance(f, BinaryField)
    ]
    return list(queryset.values(*fields))


def _by(rows: list[dict], key: str) -> dict:
    grouped = defaultdict(list)
    for row in rows:
        grouped[row[key]].append(row)
    return grouped


def jobs_export(job_ids) -> dict:
    """The export document of every job in ``job_ids`` that exists, by job ID."""
    ids = list(job_ids)
    jobs = _rows(Job.objects.filter(pk__in=ids))
    attempts = _by(_rows(Attempt.objects.filter(job_id__in=ids).order_by("lease_version")), "job_id")
    transitions = _by(_rows(Transition.objects.filter(job_id__in=ids).order_by("id")), "job_id")
    steps = _by(_rows(StepEvent.objects.filter(job_id__in=ids).order_by("id")), "job_id")
    effects = _by(_rows(Effect.objects.filter(job_id__in=ids).order_by("id")), "job_id")
    stale = _by(_rows(StaleWrite.objects.filter(job_id__in=ids).order_by("id")), "job_id")
    escalations = _by(_rows(ReviewEscalation.objects.filter(job_id__in=ids)), "job_id")
    shadows = _by(_rows(ShadowRun.objects.filter(job_id__in=ids).order_by("id")), "job_id")
    findings = Finding.objects.filter(job_id__in=ids).select_related("candidate").order_by("id")
    finding_rows = defaultdict(list)
    for row, finding in zip(_rows(findings), findings):
        finding_rows[row["job_id"]].append(
            {
                **row,
                "image_url": finding.candidate.image_url,
                "page_url": finding.candidate.page_url,
                "thumbnail_bytes": len(finding.thumbnail or b""),
            }
        )
    plans = {plan["job_id"]: plan for plan in _rows(RecheckPlan.objects.filter(job_id__in=ids))}
    observations = _by(
        _rows(Observation.objects.filter(plan_id__in=[p["id"] for p in plans.values()]).order_by("sequence")),
        "plan_id",
    )
    children = defaultdict(list)
    for child, parent in Job.objects.filter(parent_id__in=ids).order_by("created_at").values_list("pk", "parent_id"):
        children[parent].append(str(child))
    audit = defaultdict(list)
    if ids:
        pattern = "|".join(str(pk) for pk in ids)
        for row in _rows(AuditEntry.objects.filter(target__regex=f"({pattern})").order_by("id")):
            for pk in ids:
                if str(pk) in row["target"]:
                    audit[pk].append(row)
    now = timezone.now()
    documents = {}
    for job in jobs:
        pk = job["id"]
        plan = plans.get(pk)
        documents[pk] = {
            "format": FORMAT,
            "exported_at": now,
            "job": job,
            "attempts": attempts[pk],
            "transitions": transitions[pk],
            "step_events": steps[pk],
            "effects": effects[pk],
            "stale_writes": stale[pk],
            "review": {
                "escalation": escalations[pk],
                "decisions": [t for t in transitions[pk] if t["from_state"] == State.READY_FOR_REVIEW],
            },
            "findings": finding_rows[pk],
            "recheck_plan": None if plan is None else {**plan, "observations": observations[plan["id"]]},
            "shadow_runs": shadows[pk],
            "children": children[pk],
            "audit": audit[pk],
        }
    return documents


def job_export(job: Job) -> dict:
    return jobs_export([job.pk])[job.pk]


def export_json(document: dict, *, indent: int | None = 2) -> str:
    return json.dumps(document, cls=DjangoJSONEncoder, indent=indent, ensure_ascii=False)


def job_export_json(job: Job) -> str:
    return export_json(job_export(job))
