"""Bulk actions on everything a jobs-list filter matches: a dry run, then throttled batches.

``bulk_preview`` says how many jobs the filter matches and which of them the action may touch, by
state ("retry now: 1,204 eligible (dead, failed); 37 not: 12 planned, 25 done"); without an action
chosen, the dry run is of the first action the filter has eligible jobs for (``default_action``).
``bulk_start`` starts only the dry run the person confirmed: the same action and the same number of
eligible jobs (else it refuses and the person looks again); it pins the filter and a high-water
mark (database time) and records the operation; the control
process runs ``bulk_step`` every round: one batch of ``BATCH`` jobs per operation, in one
set-based statement (``jobs.leases.transition_many``), keyset-paginated by job ID. Each batch
re-checks eligibility in SQL, so a job that changed meanwhile is skipped, never forced.
"""

from __future__ import annotations

import logging
import uuid

from django.core.exceptions import PermissionDenied
from django.db import OperationalError, transaction
from django.db.models import Count, Q, QuerySet

from dashboard.models import BulkOperation
from dashboard.operations.deadletters import STEP, ended_in_step
from jobs import leases
from jobs.audit import audit_record
from jobs.models import Job, LeitstandNow, database_now
from jobs.selectors import id_prefix_range, subject_prefix
from jobs.services import JobInputError

logger = logging.getLogger(__name__)

# In the order a dry run defaults to: the first with eligible jobs (cancelling is the last resort).
ACTIONS = {"retry_now": "Retry now", "confirm": "Confirm the outcome", "cancel": "Cancel"}
FILTER_KEYS = {
    "state__exact": "state",
    "type__exact": "type",
    "pool": "pool",
    "priority__exact": "priority",
    "source": "source",
    "error_class": "error_class",
    "batch": "batch",
    "step": "step",
    "subject": "subject",
}
BATCH = 200


def filter_from(params) -> dict:
    """The supported filter keys of a jobs-list query string (others are refused, not ignored)."""
    chosen = {}
    for key, value in params.items():
        if key in (
            "q",
            "o",
            "p",
            "e",
            "_changelist_filters",
            "action_name",
            "reason",
            "csrfmiddlewaretoken",
            "confirm",
        ):
            continue
        if key not in FILTER_KEYS:
            raise JobInputError("filter", f"{key} is not a filter bulk actions support ({', '.join(FILTER_KEYS)}, q)")
        chosen[FILTER_KEYS[key]] = value
    if "step" in chosen and not STEP.fullmatch(chosen["step"]):
        raise JobInputError("step", "must be a step name (lower-case letters, digits, _)")
    if params.get("q"):
        chosen["q"] = params["q"].strip()
    for field in ("priority", "batch"):
        if field in chosen:
            try:
                chosen[field] = int(chosen[field])
            except ValueError:
                raise JobInputError(field, "must be an integer") from None
    return chosen


def matching(job_filter: dict) -> QuerySet:
    query = Job.objects.all()
    for field, value in job_filter.items():
        if field == "q":  # as the jobs list searches (dashboard/admin/jobs.py)
            match = Q(correlation_id=value) | Q(idempotency_key=value) | subject_prefix(value)
            try:
                match |= Q(id=uuid.UUID(value))
            except ValueError:
                if bounds := id_prefix_range(value):
                    match |= Q(id__gte=bounds[0], id__lte=bounds[1])
            query = query.filter(match)
        elif field == "step":
            query = query.filter(ended_in_step(value))
        elif field == "subject":  # a prefix, as the jobs list filters
            query = query.filter(subject_prefix(value))
        else:
            query = query.filter(**{field: value})
    return query


def _by_state(job_filter: dict) -> dict[str, int]:
    return dict(matching(job_filter).order_by().values_list("state").annotate(n=Count("id")))


def _eligible(action: str, by_state: dict[str, int]) -> int:
    allowed = set(leases.sources_of(action))
    return sum(n for state, n in by_state.items() if state in allowed)


def bulk_preview(action: str | None, job_filter: dict) -> dict:
    """The dry run of ``action`` (None: the first action with eligible jobs) on the filter, with
    every action's eligible count, so a person can switch to another dry run."""
    if action is not None and action not in ACTIONS:
        raise JobInputError("action", f"must be one of {', '.join(ACTIONS)}")
    by_state = _by_state(job_filter)
    each = {name: _eligible(name, by_state) for name in ACTIONS}
    action = action or next((name for name, n in each.items() if n), next(iter(ACTIONS)))
    allowed = set(leases.sources_of(action))
    return {
        "action": action,
        "label": ACTIONS[action],
        "eligible": each[action],
        "each": {name: (ACTIONS[name], n) for name, n in each.items()},
        "allowed_states": sorted(allowed),
        "not_eligible": {state: n for state, n in sorted(by_state.items()) if state not in allowed},
    }


def bulk_start(
    *, action: str, job_filter: dict, actor: str, reason: str, user, confirmed_eligible: int | None = None
) -> BulkOperation:
    """Start ``action`` on the filter; with ``confirmed_eligible`` (what the person confirmed), only
    while the dry run still finds exactly that many eligible jobs."""
    if not reason or not reason.strip():
        raise JobInputError("reason", "is required: say why, it goes into every job's audit log")
    if action not in ACTIONS:
        raise JobInputError("action", f"must be one of {', '.join(ACTIONS)}")
    preview = bulk_preview(action, job_filter)
    if preview["eligible"] == 0:
        raise JobInputError("filter", "no job matching this filter is eligible")
    if confirmed_eligible is not None and confirmed_eligible != preview["eligible"]:
        raise JobInputError(
            "confirm",
            f"the dry run changed: {preview['eligible']} jobs are eligible for {preview['label'].lower()} now, "
            f"not the {confirmed_eligible} you confirmed; look at it again and confirm",
        )
    field = Job._meta.get_field("state")
    permission = next(t.permission for t in field.get_all_transitions(Job) if t.name == action)
    if not user.has_perm(permission):
        raise PermissionDenied(f"{user} lacks the permission to {action} jobs")
    operation = BulkOperation.objects.create(
        action=action,
        filter=job_filter,
        high_water=database_now(),
        actor=actor,
        reason=reason.strip()[:500],
        eligible=preview["eligible"],
    )
    audit_record(
        actor=actor,
        action=f"bulk.{action}.start",
        target=f"bulk {operation.pk}: filter {job_filter}",
        reason=reason,
        result=f"{preview['eligible']} eligible; pinned at {operation.high_water:%H:%M:%S}",
    )
    return operation


def bulk_step(*, batch: int = BATCH) -> int:
    """One batch of every running operation; returns the number of jobs changed."""
    changed_total = 0
    for operation_id in BulkOperation.objects.filter(state=BulkOperation.State.RUNNING).values_list("pk", flat=True):
        try:
            changed_total += _operation_step(operation_id, batch)
        except OperationalError:
            # A timeout, a deadlock, a lost connection: the operation is not at fault; it goes on next
            # round, and the others go on now (its savepoint is rolled back).
            logger.warning("bulk operation %s: a batch failed, tried again next round", operation_id, exc_info=True)
        except Exception as failed:
            # One operation that cannot run (a filter the database refuses) ends failed, with why;
            # the other operations go on.
            logger.exception("bulk operation %s failed", operation_id)
            _operation_failed(operation_id, f"{type(failed).__name__}: {failed}")
    return changed_total


def _operation_failed(operation_id: int, error: str) -> None:
    with transaction.atomic():
        operation = BulkOperation.objects.select_for_update().get(pk=operation_id)
        operation.last_error = error[:500]
        _operation_end(operation, BulkOperation.State.FAILED, f"failed after {operation.changed} changed: {error}")


def _operation_end(operation: BulkOperation, state: str, result: str) -> None:
    operation.state, operation.finished_at = state, LeitstandNow()
    operation.save()
    audit_record(
        actor=operation.actor,
        action=f"bulk.{operation.action}.{state}",
        target=f"bulk {operation.pk}: filter {operation.filter}",
        reason=operation.reason,
        result=result[:500],
    )


def _operation_step(operation_id: int, batch: int) -> int:
    """One batch of one operation in a transaction of its own (a savepoint inside the sweep's); the
    number of jobs it changed."""
    with transaction.atomic():
        operation = BulkOperation.objects.select_for_update(skip_locked=True).filter(pk=operation_id).first()
        if operation is None or operation.state != BulkOperation.State.RUNNING:
            return 0
        query = matching(operation.filter).filter(
            created_at__lte=operation.high_water, state__in=leases.sources_of(operation.action)
        )
        if operation.cursor:
            query = query.filter(id__gt=operation.cursor)
        ids = list(query.order_by("id").values_list("id", flat=True)[:batch])
        if not ids:
            _operation_end(
                operation,
                BulkOperation.State.DONE,
                f"{operation.changed} changed, {operation.skipped} skipped in {operation.batches} batches",
            )
            return 0
        done = leases.transition_many(
            operation.action,
            ids,
            actor=operation.actor,
            reason=operation.reason,
            cause=f"bulk {operation.pk} ({ACTIONS[operation.action].lower()}): {operation.reason}",
        )
        operation.changed += len(done)
        operation.skipped += len(ids) - len(done)
        operation.cursor, operation.batches = ids[-1], operation.batches + 1
        operation.save()
    return len(done)
