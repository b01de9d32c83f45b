"""Services that create jobs and apply human and API decisions to them.

Views, admin actions, API endpoints and commands call these; they validate input with precise
messages, and every state change goes through ``jobs.leases``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote, unquote, urlsplit

from django.core.exceptions import PermissionDenied
from django.db import connection, transaction

from jobs import leases
from jobs.models import (
    ESCALATED_REVIEW_PERMISSION,
    LEASED_STATES,
    OPERATE_PERMISSION,
    Job,
    LeitstandNow,
    ReviewEscalation,
    ReviewLease,
    State,
)
from jobs.sql import queries

_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_PAYLOAD_BYTES = 1_000_000


class JobInputError(ValueError):
    """Invalid input for a job; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class IdempotencyConflict(Exception):
    """The idempotency key is taken, in the same namespace, by a job of the same type that was
    submitted with a different request."""

    def __init__(self, job: Job) -> None:
        what = "request (payload, priority, source, due time or correlation ID)" if job.request_hash else "payload"
        super().__init__(
            f"idempotency key {job.idempotency_key!r} already names job {job.id} of type {job.type} "
            f"submitted with a different {what}"
        )
        self.job = job


@dataclass(frozen=True)
class Submission:
    job: Job
    created: bool  # False: the same key and payload were submitted before; this is that job


@dataclass(frozen=True)
class BulkSubmission:
    """One job of a bulk creation: its ID, its batch, and whether it was created now (False: its key
    named a job submitted before with the same request)."""

    job_id: uuid.UUID | None  # None: refused, nothing was created
    batch_id: int | None
    created: bool
    # With conflicts="report": the key names a job submitted with a different request (not created).
    conflict: bool = False
    # A fan-out's child its checks refused (``field: reason``); nothing was created for it.
    refused: str = ""


def job_check(
    *,
    type: str,
    idempotency_key: str,
    payload,
    priority: int,
    max_attempts: int,
    correlation_id: str,
    source: str,
    schema_version: int,
    pool: str,
) -> bytes:
    """The checks the insert makes of one job, field by field (``JobInputError`` naming the field):
    what a dry run and a handler's fan-out test a child with before it is created. Its payload as
    JSON (for its size, and to store)."""
    for name, value in (("type", type), ("pool", pool)):
        if not isinstance(value, str) or not _TYPE_PATTERN.match(value):
            raise JobInputError(
                name, "must be 1-64 characters: lowercase letters, digits, '_', '.', '-', starting with a letter"
            )
    if not isinstance(idempotency_key, str) or not idempotency_key.strip() or len(idempotency_key) > 255:
        raise JobInputError("idempotency_key", "must be a non-empty string of at most 255 characters")
    text_check("idempotency_key", idempotency_key)
    if not isinstance(payload, dict):
        raise JobInputError("payload", f"must be a JSON object, got {payload.__class__.__name__}")
    try:
        encoded = json.dumps(payload, sort_keys=True, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise JobInputError("payload", f"is not JSON-serialisable: {exc}") from None
    if b"\\u0000" in encoded:
        raise JobInputError("payload", "must not contain NUL characters (PostgreSQL text cannot store them)")
    if b"\\ud" in encoded and _has_lone_surrogate(payload):
        raise JobInputError("payload", "must not contain lone surrogates (\\ud800-\\udfff): they are no characters")
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise JobInputError("payload", f"is {len(encoded)} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise JobInputError("priority", "must be an integer from 0 (most urgent) to 9 (bulk)")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 100:
        raise JobInputError("max_attempts", "must be an integer from 1 to 100")
    if isinstance(schema_version, bool) or not isinstance(schema_version, int) or not 1 <= schema_version <= 32767:
        raise JobInputError("schema_version", "must be a positive integer")
    text_check("correlation_id", correlation_id)
    text_check("source", source)
    return encoded


def _has_lone_surrogate(payload: dict) -> bool:
    """JSON may spell a lone surrogate (``"\\ud800"``); PostgreSQL's jsonb cannot store it."""
    try:
        json.dumps(payload, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def text_check(field: str, value, *, limit: int = 255) -> None:
    """A name that travels into logs (key, source, correlation ID): printable characters only — a
    CR/LF would forge log lines and break every webhook's headers for the job."""
    if not isinstance(value, str) or len(value) > limit:
        raise JobInputError(field, f"must be a string of at most {limit} characters")
    if not value.isprintable():
        raise JobInputError(field, "must contain printable characters only (no line breaks or control characters)")


SUBJECT_LENGTH = 500  # a job's subject is cut to it (a prefix search still finds it)


# What a type's jobs share their pool by (its declaration in the job-type registry): its fair share,
# running limit and pause are per key (docs/operations.md, "Fair shares").
FLOW_KEYS = ("", "source", "client", "host")  # and "payload.<field>"


def url_host_key(url: str) -> str:
    """The host a URL asks, as ``host:port`` (the scheme's port when it names none): a flow key of
    jobs keyed by host, and the pipeline's politeness key. '' for what is not an http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # an invalid port or IPv6 literal
        return ""
    return f"{parts.hostname}:{port}" if parts.hostname and port else ""


def flow_key_check(declaration: str) -> None:
    """Raise ValueError unless ``declaration`` is a flow key a type may declare."""
    field = declaration.removeprefix("payload.")
    if declaration not in FLOW_KEYS and not (declaration.startswith("payload.") and field.isidentifier()):
        raise ValueError(f"flow_key must be one of {', '.join(map(repr, FLOW_KEYS))} or 'payload.<field>'")


# Printable ASCII but '%' stays as it is in a stored flow key; '%' and every other character is
# percent-encoded, so two names never share a key ("100%" is 100%25, "Bücher" is B%C3%BCcher).
_KEY_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")
MAX_FLOW_KEY = 255


def flow_key_stored(name: str) -> str:
    """A flow key as jobs carry it, from the name it was given: printable ASCII (as it travels into
    metrics and logs), the rest percent-encoded as UTF-8, '%' included; at most 255 characters, cut
    between characters (never inside one's encoding), so ``flow_key_named`` gives the name back."""
    stored = quote(name, safe=_KEY_SAFE, errors="backslashreplace")
    if len(stored) <= MAX_FLOW_KEY:
        return stored
    pieces, length = [], 0
    for character in name:
        piece = quote(character, safe=_KEY_SAFE, errors="backslashreplace")
        if length + len(piece) > MAX_FLOW_KEY:
            break
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)


def flow_key_named(stored: str) -> str:
    """A stored flow key as people named it (what the console and the API show and take)."""
    return unquote(stored, errors="replace")


def flow_key_of(declaration: str, *, payload: dict, source: str, subject: str, key_namespace: str) -> str:
    """A new job's flow key, as its type declares it (``declaration``: see ``FLOW_KEYS``): its source,
    its client ('client:<name>', '' for the system's own), the host of its subject (a URL), or a
    payload field's value — printable ASCII, at most 255 characters, as it travels into the console,
    metrics and logs."""
    if declaration == "source":
        key = source
    elif declaration == "client":
        key = key_namespace
    elif declaration == "host":
        key = url_host_key(subject)
    elif declaration.startswith("payload."):
        value = payload.get(declaration.removeprefix("payload."))
        key = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    else:
        key = ""
    return flow_key_stored(key)


def job_cancel(*, job_id, actor: str, reason: str, user=None) -> Job:
    """Cancel a job that is not terminal; a running attempt's later writes are refused as stale."""
    _require_reason(reason)
    return leases.transition_apply(
        job_id, "cancel", actor=actor, cause=f"cancelled: {reason}", user=user, reason=reason
    )


def job_hold(*, job_id, actor: str, reason: str, user=None) -> Job:
    """Hold a job waiting in line (planned): no worker claims it until a person resumes it. It keeps
    its due time, so it comes back at its place in line; the transition log keeps who, when and why."""
    _require_reason(reason)
    text_check("reason", reason, limit=480)  # it is shown in the job's sentence: one printable line
    return leases.transition_apply(job_id, "hold", actor=actor, cause=f"held: {reason}", user=user, reason=reason)


def job_resume(*, job_id, actor: str, reason: str, user=None) -> Job:
    """Put a held job back in line (planned) at the place its due time gives it."""
    _require_reason(reason)
    text_check("reason", reason, limit=480)
    return leases.transition_apply(job_id, "resume", actor=actor, cause=f"resumed: {reason}", user=user, reason=reason)


def job_confirm(*, job_id, actor: str, reason: str = "business outcome confirmed", user=None) -> Job:
    """Confirm the business outcome of an executed job: result_stored (or recheck_due) → done."""
    return leases.transition_apply(job_id, "confirm", actor=actor, cause=reason, user=user, reason=reason)


def job_retry_now(*, job_id, actor: str, reason: str, user=None) -> Job:
    """Retry a failed or dead job now, with a fresh retry budget (the dead-letter queue's retry)."""
    _require_reason(reason)
    return leases.transition_apply(
        job_id, "retry_now", actor=actor, cause=f"retry now: {reason}", user=user, reason=reason
    )


def job_release(*, job_id, actor: str, reason: str, user=None) -> Job:
    """Hand a leased job back (an operator who knows its worker is gone): planned again, due now, no
    retry budget used; the old attempt's later writes are refused as stale."""
    _require_reason(reason)
    _require_operator(user)
    job = _job(job_id)
    if job.state not in LEASED_STATES:
        raise JobInputError("job", f"the job is {job.state}: no lease to release")
    leases.release(job.id, job.lease_version, actor=actor, reason=f"released from the console: {reason}")
    return Job.objects.get(pk=job.pk)


def job_reorder(
    *, job_id, actor: str, reason: str, priority: int | None = None, due_at: datetime | None = None, user=None
) -> Job:
    """Move a job waiting in line (planned) to another lane (``priority``, 0 the most urgent, 9 the
    bulk lane) or another due time (``due_at``, aware; earlier moves it up the line, later holds it
    back until then). ``actor`` is recorded by the caller's audit entry."""
    _require_reason(reason)
    text_check("reason", reason, limit=480)  # it goes into the log and the audit: one printable line
    _require_operator(user)
    if priority is None and due_at is None:
        raise JobInputError("priority", "give a priority or a due time to move the job to")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9):
        raise JobInputError("priority", "must be a whole number from 0 (most urgent) to 9 (the bulk lane)")
    if due_at is not None and (due_at.tzinfo is None or due_at.utcoffset() is None):
        raise JobInputError("due_at", "must name its time zone")
    job = _job(job_id)
    if leases.reorder(job.id, priority=priority, due_at=due_at) is None:
        raise JobInputError("job", f"the job is {job.state}: only a job waiting in line (planned) can be moved")
    return Job.objects.get(pk=job.pk)


def job_send_to_review(*, job_id, actor: str, reason: str, user=None) -> Job:
    """Open a review case now (an unclear job, or a case under recheck that a person should decide)."""
    _require_reason(reason)
    _require_operator(user)
    job = _job(job_id)
    if leases.review_queue_job(job.id, actor=actor, cause=f"sent to review: {reason}") is None:
        raise JobInputError("job", f"the job is {job.state}: it cannot go to review")
    return Job.objects.get(pk=job.pk)


def _job(job_id) -> Job:
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise leases.JobNotFound(job_id)
    return job


def _require_operator(user) -> None:
    if user is not None and not user.has_perm(OPERATE_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to operate jobs")


def review_decide(*, job_id, actor: str, reason: str, user=None, is_match: bool = False) -> Job:
    """A reviewer's decision on a review case: ready_for_review → done, or → recheck_due for a match
    (followed up like an automatic match). A case another reviewer holds is refused."""
    _require_reason(reason)
    with transaction.atomic():
        held = ReviewLease.objects.select_for_update().filter(job_id=job_id, expires_at__gt=LeitstandNow()).first()
        if held and held.reviewer != actor:
            raise ReviewHeld(held)
        escalation = ReviewEscalation.objects.filter(job_id=job_id).first()
        if escalation is not None:
            _require_senior_reviewer(user, escalation, actor)
        name = "decide_match" if is_match else "decide"
        job = leases.transition_apply(job_id, name, actor=actor, cause=f"decided: {reason}", user=user, reason=reason)
        ReviewLease.objects.filter(job_id=job_id).delete()
        ReviewEscalation.objects.filter(job_id=job_id).delete()
    return job


def _require_senior_reviewer(user, escalation: ReviewEscalation, actor: str) -> None:
    """An escalated case is decided by a senior reviewer, and never by the one who escalated it."""
    if escalation.escalated_by == actor:
        raise PermissionDenied(f"{actor} escalated this case: another senior reviewer decides it")
    if user is not None and not user.has_perm(ESCALATED_REVIEW_PERMISSION):
        raise PermissionDenied(f"{user} lacks the permission to decide escalated cases (senior reviewer)")


def review_escalate(*, job_id, actor: str, reason: str, user=None) -> ReviewEscalation:
    """Hand a review case to the escalated queue; it stays ready for review."""
    _require_reason(reason)
    if user is not None and not user.has_perm("jobs.review_job"):
        raise PermissionDenied(f"{user} lacks the permission to review jobs")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.state != "ready_for_review":
            raise JobInputError("job", f"job {job.id} is {job.state}, not ready for review")
        held = ReviewLease.objects.filter(job_id=job_id, expires_at__gt=LeitstandNow()).first()
        if held and held.reviewer != actor:
            raise ReviewHeld(held)
        earlier = ReviewEscalation.objects.filter(job=job).first()
        if earlier is not None:
            # There is no queue above the escalated one, and a second escalation would replace the
            # first escalator's name: who escalated a case must never be the one who decides it.
            raise JobInputError(
                "job", f"the case is escalated already (by {earlier.escalated_by}): decide it or skip it"
            )
        escalation = ReviewEscalation.objects.create(
            job=job, escalated_by=actor[:255], reason=reason[:500], at=LeitstandNow()
        )
        ReviewLease.objects.filter(job_id=job_id).delete()
    return escalation


class ReviewHeld(Exception):
    def __init__(self, lease: ReviewLease) -> None:
        super().__init__(f"review case {lease.job_id} is held by {lease.reviewer} until {lease.expires_at:%H:%M:%S}")
        self.lease = lease


def review_take(*, reviewer: str, seconds: float, job_id=None, escalated: bool = False) -> Job | None:
    """Hold the next open review case (or the given one) of the normal or the escalated queue for
    ``seconds``; None when none is free."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            queries.review_case_take_unless_held,
            {
                "state": State.READY_FOR_REVIEW,
                "me": reviewer[:255],
                "seconds": seconds,
                "escalated": escalated,
                "job_id": str(job_id) if job_id else None,
            },
        )
        row = cursor.fetchone()
    return Job.objects.get(pk=row[0]) if row else None


def review_release(*, job_id, reviewer: str) -> None:
    """Give a case ``reviewer`` holds back to the queue (skip); a case someone else holds, or nobody,
    is refused (``JobInputError``): nothing was given back."""
    released, _ = ReviewLease.objects.filter(job_id=job_id, reviewer=reviewer).delete()
    if not released:
        holder = ReviewLease.objects.filter(job_id=job_id, expires_at__gt=LeitstandNow()).first()
        raise JobInputError(
            "job",
            f"the case is held by {holder.reviewer}: only they can skip it" if holder else "you do not hold the case",
        )


def _require_reason(reason: str) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise JobInputError("reason", "is required: say why, it goes into the job's audit log")
    if len(reason) > 480:
        raise JobInputError("reason", "must be at most 480 characters")
