"""The effect ledger: a business side effect is applied at most once per key.

A handler may run twice (a redelivered wake-up, a reaped lease, a replay), so every effect that
must not repeat — a finding, a notice, a webhook — is recorded under a natural key in the same
transaction that applies it. A second run finds the key and skips the effect. When a job attempt
applies an effect, the write is also fenced: only the attempt that holds the lease may apply it.

An attempt's effect in a transaction of its own commits without waiting for the disk
(``synchronous_commit`` off for that transaction): the attempt ends with a durable commit — its
result, failure or release — and PostgreSQL writes its log in order, so that flush makes the effect
durable too. A job is never recorded as done without its effect; a database crash in the
milliseconds between the two loses both, and the job runs again with its key free. Only an effect
whose attempt ends without writing (its lease lost) waits for the server's background flush
(``wal_writer_delay``). One disk flush per attempt instead of two. Inside a caller's transaction
the caller's commit decides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from jobs import leases
from jobs.sql import queries


@dataclass(frozen=True)
class EffectOutcome:
    key: str
    applied: bool  # False: the key was already in the ledger, so the effect was not applied again
    value: Any = None  # what apply() returned, then or the first time (as JSON: tuples become lists)


def _dumps(value: Any) -> str:
    # Values that JSON cannot hold (datetimes, UUIDs, Decimals) are recorded as their text.
    return json.dumps(value, default=str)


def _decoded(recorded: Any) -> Any:
    # Django leaves JSON undecoded on raw cursors.
    return json.loads(recorded) if isinstance(recorded, str) else recorded


def effect_apply_once(
    *,
    key: str,
    kind: str,
    apply: Callable[[], Any],
    job_id=None,
    lease_version: int | None = None,
    detail: dict | None = None,
) -> EffectOutcome:
    """Apply ``apply()`` unless ``key`` is already in the ledger, recording it in the same transaction.

    If ``apply`` raises, nothing is recorded and the effect can be tried again. With ``job_id``, the
    caller must be the attempt holding the job's lease (``lease_version``); a stale attempt's effect
    is refused, recorded and raised as ``StaleAttempt``.
    """
    if not key or len(key) > 255:
        raise ValueError("an effect key must be 1 to 255 characters")
    if (job_id is None) != (lease_version is None):
        raise ValueError("job_id and lease_version go together: an attempt's effect is fenced by its lease")
    relaxed = job_id is not None and not connection.in_atomic_block
    with transaction.atomic():
        is_entitled = job_id is None or leases.lease_lock_if_held(job_id, lease_version) is not None
        if is_entitled:
            with connection.cursor() as cursor:
                cursor.execute(
                    queries.effect_insert_unless_key_exists,
                    {
                        "key": key,
                        "kind": kind[:64],
                        "job_id": str(job_id) if job_id else None,
                        "lease_version": lease_version,
                        "detail": Jsonb(detail or {}),
                        "relaxed": relaxed,
                    },
                )
                inserted = cursor.fetchone() is not None
                if not inserted:
                    cursor.execute(queries.effect_result_get, {"key": key})
                    (recorded,) = cursor.fetchone()
                    return EffectOutcome(key=key, applied=False, value=_decoded(recorded))
                value = apply()
                cursor.execute(queries.effect_result_set, {"result": Jsonb(value, dumps=_dumps), "key": key})
            return EffectOutcome(key=key, applied=True, value=value)
    # Recorded outside the rolled-back block above, so the refusal survives.
    raise leases.refusal_record(job_id, lease_version, "effect")
