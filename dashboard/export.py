"""One JSON document with everything about a job, for post-mortems and audits
(``manage.py export_job JOB_ID`` and the job page's *Export JSON*)."""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import BinaryField
from django.utils import timezone

from dashboard.models import AuditEntry
from jobs.models import Attempt, Effect, Job, ReviewEscalation, StaleWrite, State, StepEvent, Transition
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


def job_export(job: Job) -> dict:
    plan = RecheckPlan.objects.filter(job=job).first()
    findings = Finding.objects.filter(job=job).select_related("candidate").order_by("id")
    return {
        "format": FORMAT,
        "exported_at": timezone.now(),
        "job": _rows(Job.objects.filter(pk=job.pk))[0],
        "attempts": _rows(Attempt.objects.filter(job=job).order_by("lease_version")),
        "transitions": _rows(Transition.objects.filter(job=job).order_by("id")),
        "step_events": _rows(StepEvent.objects.filter(job=job).order_by("id")),
        "effects": _rows(Effect.objects.filter(job=job).order_by("id")),
        "stale_writes": _rows(StaleWrite.objects.filter(job=job).order_by("id")),
        "review": {
            "escalation": _rows(ReviewEscalation.objects.filter(job=job)),
            "decisions": _rows(Transition.objects.filter(job=job, from_state=State.READY_FOR_REVIEW).order_by("id")),
        },
        "findings": [
            {
                **row,
                "image_url": f.candidate.image_url,
                "page_url": f.candidate.page_url,
                "thumbnail_bytes": len(f.thumbnail or b""),
            }
            for row, f in zip(_rows(findings), findings)
        ],
        "recheck_plan": None
        if plan is None
        else {
            **_rows(RecheckPlan.objects.filter(pk=plan.pk))[0],
            "observations": _rows(Observation.objects.filter(plan=plan).order_by("sequence")),
        },
        "shadow_runs": _rows(ShadowRun.objects.filter(job=job).order_by("id")),
        "children": [
            str(pk) for pk in Job.objects.filter(parent=job).order_by("created_at").values_list("pk", flat=True)
        ],
        "audit": _rows(AuditEntry.objects.filter(target__contains=str(job.pk)).order_by("id")),
    }


def job_export_json(job: Job) -> str:
    return json.dumps(job_export(job), cls=DjangoJSONEncoder, indent=2, ensure_ascii=False)
