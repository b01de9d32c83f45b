"""``manage.py enqueue <type> --payload JSON [--priority N] [--key K] [--count N]``: create jobs."""

import json
import uuid

from django.core.management.base import BaseCommand, CommandError

from jobs.services import IdempotencyConflict, JobInputError
from workers.runtime.services import job_submit


class Command(BaseCommand):
    help = "Create jobs of a registered type (idempotent per key; with --count, keys KEY-1 … KEY-N)."

    def add_arguments(self, parser):
        parser.add_argument("type")
        parser.add_argument("--payload", default="{}", help="a JSON object (default {})")
        parser.add_argument("--priority", type=int, default=None, help="0 (most urgent) … 9 (bulk)")
        parser.add_argument("--key", default=None, help="idempotency key (default: a new random key)")
        parser.add_argument("--count", type=int, default=1)
        parser.add_argument("--correlation-id", default="")

    def handle(self, *args, type, payload, priority, key, count, correlation_id, **options):
        try:
            parsed = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--payload is not valid JSON: {exc}") from None
        if count < 1:
            raise CommandError("--count must be at least 1")
        base = key or uuid.uuid4().hex
        created = existing = 0
        for n in range(1, count + 1):
            try:
                submission = job_submit(
                    job_type=type,
                    payload=parsed,
                    priority=priority,
                    correlation_id=correlation_id,
                    idempotency_key=base if count == 1 else f"{base}-{n}",
                    actor="command:enqueue",
                )
            except (JobInputError, IdempotencyConflict) as exc:
                raise CommandError(str(exc)) from None
            created += submission.created
            existing += not submission.created
            if count == 1:
                self.stdout.write(str(submission.job.id))
        self.stdout.write(f"{created} created, {existing} already existed (type {type}, key {base})")
