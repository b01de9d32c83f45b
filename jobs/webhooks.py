"""Webhooks to the PHP core: the outbox and the sweep that turns its events into delivery jobs.

Events are written in the transaction of the change they report, so an event exists exactly when
its change committed: a trigger on ``jobs_transition`` writes ``job.done``, ``job.dead`` and
``job.ready_for_review``; the rechecks service calls ``event_record`` when a plan ends
(``recheck_plan.ended``). The control process's sweep (``webhook_sweep``) turns each event into one
``api_webhook`` job (idempotency key ``webhook-event-<id>``) in the ``notify`` pool, through the
runtime's ``job_submit`` it is handed (the one way jobs come to be; it wakes the pool), and deletes
it from the outbox in the same transaction; the job delivers a signed POST with retries, backoff and,
in the end, the dead-letter queue. The receiver deduplicates on the event ID ``evt_<id>``.

An event goes to the webhook of the client that owns its job or batch (``Client.webhook_url``); to
the global one (``LEITSTAND_WEBHOOK``) when the job belongs to no client, or when an operator chose
the global webhook for its client (``Client.uses_global_webhook``); otherwise it is dropped — a
partner's events never reach the PHP core's receiver looking like the core's own. Every body and
the ``X-Leitstand-Client`` header name the client (null/absent for the system's own jobs). Which
events and job types are delivered is the global setting's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext

from django.db import connection, transaction

from jobs import options, tracing
from jobs.models import Batch, Client, Job, Transition, WebhookEvent
from jobs.options import EVENT_KINDS, WebhookOptions
from jobs.sql import queries

DELIVERY_TYPE = "api_webhook"
# The system's own deliveries never cause webhooks: a delivered webhook would announce itself.
SILENT_TYPES = frozenset({DELIVERY_TYPE, "alert_notify", "shadow"})
ACTOR = "webhooks"
logger = logging.getLogger("leitstand.webhooks")


def event_record(*, kind: str, data: dict, job_id=None, batch_id: int | None = None) -> None:
    """Record an event about a job or a batch in the outbox; call it inside the transaction of the
    change it reports."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown webhook event kind {kind!r}; known: {', '.join(EVENT_KINDS)}")
    WebhookEvent.objects.create(kind=kind, job_id=job_id, batch_id=batch_id, data=data)


def webhook_sweep(*, create: Callable[..., object], limit: int = 1000) -> int:
    """Turn up to ``limit`` outbox events into delivery jobs through ``create`` (the runtime's
    ``job_submit``: the one way jobs come to be, which wakes the notify pool) — or drop them when the
    event or job type is not subscribed, or nobody receives them; returns the number of deliveries. Without any webhook
    (no global URL, no client's own) every event written so far is dropped in one statement, so the
    outbox never grows however fast jobs end."""
    hook = options.current().webhook
    if not hook.url and not Client.objects.exclude(webhook_url="").exists():
        with connection.cursor() as cursor:
            cursor.execute(queries.webhook_events_drop_all)
        return 0
    with transaction.atomic():
        events = list(WebhookEvent.objects.select_for_update(skip_locked=True).filter(error="").order_by("id")[:limit])
        if not events:
            return 0
        deliveries, handled = 0, []
        jobs = Job.objects.in_bulk({event.job_id for event in events if event.job_id})
        owners = dict(
            Batch.objects.filter(pk__in={e.batch_id for e in events if e.batch_id}).values_list("pk", "client_id")
        )
        receivers = {
            client.pk: client
            for client in Client.objects.filter(
                pk__in={job.client_id for job in jobs.values()} | set(owners.values())
            ).only("name", "webhook_url", "uses_global_webhook")
        }
        causes = dict(
            Transition.objects.filter(pk__in=[e.transition_id for e in events if e.transition_id]).values_list(
                "pk", "cause"
            )
        )
        for event in events:
            try:
                with transaction.atomic():  # one bad event is recorded and skipped; the rest are delivered
                    deliveries += _delivery_create(
                        create, hook, receivers, event, jobs.get(event.job_id), owners, causes
                    )
            except Exception as failed:
                logger.exception("webhook event %s could not become a delivery; it stays in the outbox", event.pk)
                WebhookEvent.objects.filter(pk=event.pk).update(error=f"{failed.__class__.__name__}: {failed}"[:2000])
            else:
                handled.append(event.pk)
        WebhookEvent.objects.filter(pk__in=handled).delete()
    return deliveries


def _delivery_create(
    create: Callable[..., object],
    hook: WebhookOptions,
    receivers: dict,
    event: WebhookEvent,
    job: Job | None,
    owners: dict,
    causes: dict,
) -> int:
    """The delivery job of one event (1), or nothing when it is not subscribed or nobody receives it (0).
    ``receivers``: the owners' clients (id → Client); ``owners``: batch → client id."""
    if event.batch_id is not None:  # a batch's event: no job to filter by
        if event.kind not in hook.events:
            return 0
        message = batch_message(event)
        correlation_id = event.data.get("batch", {}).get("correlation_id", "")
        owner = owners.get(event.batch_id)
    else:
        if job is None or not _subscribed(hook, event.kind, job.type):
            return 0
        message = event_message(event, job, causes.get(event.transition_id, ""))
        correlation_id = job.correlation_id
        owner = job.client_id
    client = receivers.get(owner)
    message["client"] = client.name if client else None  # whose job: the receiver may check it is its own
    payload = {"event": message}
    if client is not None and client.webhook_url:
        payload["client"] = client.name  # its own webhook, signed with its own secret
    elif not hook.url or (client is not None and not client.uses_global_webhook):
        return 0  # nobody chose a receiver for this client's events
    # The delivery is created in its job's trace (jobs/tracing.py), and so carries it to the receiver.
    with tracing.attached(job.trace_parent, job.trace_state) if job is not None else nullcontext():
        create(
            job_type=DELIVERY_TYPE,
            idempotency_key=f"webhook-event-{event.pk}",
            payload=payload,
            actor=ACTOR,
            correlation_id=correlation_id,  # stored header-safe (jobs.correlation.header_safe)
            priority=1,
        )
    return 1


def _subscribed(hook: WebhookOptions, kind: str, job_type: str) -> bool:
    if job_type in SILENT_TYPES or kind not in hook.events:
        return False
    return not hook.job_types or job_type in hook.job_types


def batch_message(event: WebhookEvent) -> dict:
    """The body of a batch's webhook: the batch with its final counters and statistics."""
    return {
        "id": f"evt_{event.pk}",
        "type": event.kind,
        "occurred_at": event.occurred_at.isoformat(),
        "batch": event.data.get("batch", {}),
    }


def event_message(event: WebhookEvent, job: Job, cause: str = "") -> dict:
    """The body of one webhook: the event's ID, kind and time, and the job it is about (the state in
    the event, not the job's state now); ``recheck_plan`` for a plan's end."""
    message = {
        "id": f"evt_{event.pk}",
        "type": event.kind,
        "occurred_at": event.occurred_at.isoformat(),
        "job": {
            "id": str(job.pk),
            "type": job.type,
            "idempotency_key": job.idempotency_key,
            "correlation_id": job.correlation_id,
            "source": job.source,
            "state": event.kind.removeprefix("job.") if event.kind.startswith("job.") else job.state,
            "cause": cause,
        },
    }
    if event.kind == "recheck_plan.ended":
        message["recheck_plan"] = event.data
    return message
