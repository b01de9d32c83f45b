"""The django-q2 task entry point: ``wake(pool)`` runs due jobs of the pool in this worker process."""

from workers.runtime.pool import PoolRuntime


def wake(pool: str) -> dict:
    return PoolRuntime.for_pool(pool).wake().as_dict()
