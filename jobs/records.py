"""A job's full record, assembled in one place: the job with its attempts, transitions, step events,
effects, stale writes, review escalation, children and audit entries, plus what apps attach to it —
findings, a recheck plan, shadow runs — registered by those apps (``record_part_register``, from
their ``AppConfig.ready``) as they register job types.

Every part is read with the job in one statement (a JSON array per part, correlated to the job);
only the audit entries, found by a job's ID in their target, are one query for all the jobs asked.
The API's read, ``export_job``, the archive's files and the console's job and archived pages render
this record (docs/architecture.md, "One job record").
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import BinaryField, Expression, F, OuterRef
from django.db.models.functions import JSONObject

from jobs.models import Attempt, AuditEntry, Effect, Job, ReviewEscalation, StaleWrite, StepEvent, Transition


def columns(model, *, exclude: Iterable[str] = ()) -> dict[str, Expression]:
    """A model's columns as JSON fields (binary ones left out: their size is the part's to say)."""
    return {
        f.attname: F(f.attname)
        for f in model._meta.concrete_fields
        if f.name not in exclude and not isinstance(f, BinaryField)
    }


def rows_json(model, fields: dict[str, Expression] | None = None, *, order: str = "id", **filters) -> ArraySubquery:
    """The related rows' ``fields`` (output names → expressions; all columns by default) as JSON
    objects in ``order``, for a part's expression: ``filters`` correlate them to the job
    (``job=OuterRef("pk")``)."""
    named = columns(model) if fields is None else fields
    return ArraySubquery(model.objects.filter(**filters).order_by(order).values(json=JSONObject(**named)))


@dataclass(frozen=True)
class Part:
    """One part of a job's record: ``expression()`` reads it with the job (an array of JSON objects
    correlated to ``OuterRef("pk")``); ``one``: the part is a single object (or None), not a list."""

    name: str
    expression: Callable[[], Expression] = field(compare=False)
    one: bool = False


_ENGINE = (
    Part("job", lambda: rows_json(Job, pk=OuterRef("pk")), one=True),  # its columns, as JSON like the rest
    Part("attempts", lambda: rows_json(Attempt, order="lease_version", job=OuterRef("pk"))),
    Part("transitions", lambda: rows_json(Transition, job=OuterRef("pk"))),
    Part("step_events", lambda: rows_json(StepEvent, job=OuterRef("pk"))),
    Part("effects", lambda: rows_json(Effect, job=OuterRef("pk"))),
    Part("stale_writes", lambda: rows_json(StaleWrite, job=OuterRef("pk"))),
    Part("escalations", lambda: rows_json(ReviewEscalation, order="pk", job=OuterRef("pk"))),
    Part(
        "children",
        lambda: ArraySubquery(Job.objects.filter(parent=OuterRef("pk")).order_by("created_at").values("pk")),
    ),
)
_PARTS: dict[str, Part] = {part.name: part for part in _ENGINE}
AUDIT = "audit"  # the audit entries naming the job: not a correlated part (see job_records)


def record_part_register(part: Part) -> None:
    """An app's part of every job's record (its rows about the job), from its ``AppConfig.ready``."""
    if _PARTS.get(part.name, part) != part:
        raise ValueError(f"a record part named {part.name!r} is already registered")
    _PARTS[part.name] = part


def _asked(parts: Iterable[str] | None) -> tuple[tuple[str, ...], bool]:
    """The correlated parts asked for (every registered one without ``parts``), and whether the
    audit entries are."""
    names = tuple(_PARTS) + (AUDIT,) if parts is None else tuple(parts)
    return tuple(name for name in names if name != AUDIT), AUDIT in names


@dataclass
class JobRecord:
    job: Job
    parts: dict[str, object]

    def __getitem__(self, name: str):
        return self.parts[name]


def _decoded(value):
    """JSON inside an array comes undecoded from a raw cursor (and decoded through the ORM)."""
    if isinstance(value, list):
        return [json.loads(item) if isinstance(item, str) else item for item in value]
    return value


def _annotations(names: tuple[str, ...]) -> dict[str, Expression]:
    return {f"part_{name}": _PARTS[name].expression() for name in names}


_ONE_JOB = uuid.UUID(int=0)  # stands for the job's ID in the statement compiled once


@functools.cache
def _statement(names: tuple[str, ...]) -> tuple[str, tuple]:
    """One job's read with ``names`` as SQL and parameters, compiled by the ORM once per process
    (compiling the subqueries costs more than the round trips they save)."""
    return Job.objects.filter(pk=_ONE_JOB).annotate(**_annotations(names)).query.sql_with_params()


def _parts_of(job: Job, names: tuple[str, ...]) -> dict[str, object]:
    parts = {}
    for name in names:
        rows = _decoded(getattr(job, f"part_{name}"))
        if name == "children":
            rows = [str(child) for child in rows]
        parts[name] = (rows[0] if rows else None) if _PARTS[name].one else rows
    return parts


def job_record(job_id, *, parts: Iterable[str] | None = None) -> JobRecord | None:
    """One job's record (``parts``: which, by name; all without), in one statement; None for no job."""
    correlated, audit = _asked(parts)
    sql, params = _statement(correlated)
    job = next(iter(Job.objects.raw(sql, [job_id if p == _ONE_JOB else p for p in params])), None)
    if job is None:
        return None
    record = JobRecord(job, _parts_of(job, correlated))
    if audit:
        record.parts[AUDIT] = _audit([job.pk])[job.pk]
    return record


def job_records(job_ids, *, parts: Iterable[str] | None = None) -> dict[uuid.UUID, JobRecord]:
    """The records of every job in ``job_ids`` that exists, by ID: one statement for the jobs and
    their parts, one for their audit entries."""
    ids = list(job_ids)
    correlated, audit = _asked(parts)
    jobs = Job.objects.filter(pk__in=ids).annotate(**_annotations(correlated)) if ids else []
    records = {job.pk: JobRecord(job, _parts_of(job, correlated)) for job in jobs}
    if audit and records:
        for pk, entries in _audit(list(records)).items():
            records[pk].parts[AUDIT] = entries
    return records


def _audit(ids: list[uuid.UUID]) -> dict[uuid.UUID, list[dict]]:
    """The audit entries whose target names each job (an action on it, or a bulk action listing it)."""
    found: dict[uuid.UUID, list[dict]] = {pk: [] for pk in ids}
    pattern = "|".join(str(pk) for pk in ids)
    entries = AuditEntry.objects.filter(target__regex=f"({pattern})").order_by("id")
    for row in _decoded(list(entries.values_list(JSONObject(**columns(AuditEntry)), flat=True))):
        for pk in ids:
            if str(pk) in row["target"]:
                found[pk].append(row)
    return found
