"""The ``webhooks`` sweep, every round: events in the outbox (written by the trigger of a job's
transition, by batches and recheck plans) become delivery jobs (``api_webhook``) for the global
webhook and the clients' own, or are dropped when nobody subscribed (``jobs/webhooks.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs import webhooks
from workers.runtime.services import job_submit
from workers.runtime.sweeps import Stage, register_unit, require_number


@dataclass(frozen=True)
class WebhookSweepConfig:
    limit: int = 1000
    every_seconds: float = 0.0

    def __post_init__(self) -> None:
        require_number(self.limit, "the webhooks sweep's limit", minimum=1, whole=True)


def run_once(config: WebhookSweepConfig) -> int:
    """Turn outbox events into deliveries; how many deliveries."""
    return deliveries_make(limit=config.limit)


def deliveries_make(*, limit: int = 1000) -> int:
    """The outbox's events as delivery jobs, created the one way jobs come to be (``job_submit``)."""
    return webhooks.webhook_sweep(create=job_submit, limit=limit)


def register() -> None:
    register_unit("webhooks", run_once, WebhookSweepConfig(), stage=Stage.PLAN)
