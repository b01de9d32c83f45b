"""The django-q2 task entry point: ``wake(pool)`` runs due jobs of the pool in this worker process.

Its dotted path, ``workers.tasks.wake``, is stored with every queued wake-up in django-q2's broker
table, so it stays here, outside the runtime package, across restructurings: wake-ups queued by the
previous release still find it after an upgrade."""

from workers.runtime.pool import PoolRuntime


def wake(pool: str) -> dict:
    return PoolRuntime.for_pool(pool).wake().as_dict()
