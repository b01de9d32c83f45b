"""One JSON document with everything about a job, for post-mortems, audits and the archive
(``manage.py export_job JOB_ID``, the job page's *Export JSON*, and every line of an archive file).

``jobs_export`` renders the records of many jobs (``jobs.records.job_records``: one statement for
the jobs and every part, one for their audit entries), so the archive writes a file of hundreds of
jobs in two queries; ``job_export`` is the document of one.
"""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from jobs.models import Job, State
from jobs.records import job_records

FORMAT = "leitstand.job-export/1"


def jobs_export(job_ids) -> dict:
    """The export document of every job in ``job_ids`` that exists, by job ID: its record
    (``jobs.records``), with the review's escalation and decisions gathered."""
    now = timezone.now()
    documents = {}
    for pk, record in job_records(job_ids).items():
        parts = dict(record.parts)
        escalations = parts.pop("escalations")
        documents[pk] = {
            "format": FORMAT,
            "exported_at": now,
            **parts,
            "review": {
                "escalation": escalations,
                "decisions": [t for t in parts["transitions"] if t["from_state"] == State.READY_FOR_REVIEW],
            },
        }
    return documents


def job_export(job: Job) -> dict:
    return jobs_export([job.pk])[job.pk]


def export_json(document: dict, *, indent: int | None = 2) -> str:
    return json.dumps(document, cls=DjangoJSONEncoder, indent=indent, ensure_ascii=False)


def job_export_json(job: Job) -> str:
    return export_json(job_export(job))
