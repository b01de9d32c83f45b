from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """Job-type registry, pools and handlers; built on jobs.leases."""

    name = "workers"
    verbose_name = "Workers"

    def ready(self):
        from django.db.models.signals import post_migrate
        from django_q.signals import post_spawn

        # Declarations register themselves; a duplicate or incomplete one stops start-up here.
        from workers import job_types  # noqa: F401

        post_migrate.connect(_pools_ensure, sender=self)
        post_spawn.connect(_worker_spawned)


def _worker_spawned(**kwargs):
    """A django-q2 worker process of one of our pools starts: register it and start its heartbeat
    thread now, so an idle pool shows its live consumers before its first wake-up."""
    import os

    from django.conf import settings

    from workers.runtime import PoolRuntime

    pool = os.environ.get("Q_CLUSTER_NAME")
    if pool in settings.LEITSTAND_POOLS:
        PoolRuntime.for_pool(pool).start()


def _pools_ensure(**kwargs):
    """Every configured pool has a row, so the console can show and pause each of them."""
    from django.conf import settings

    from workers.models import Pool

    for name in settings.LEITSTAND_POOLS:
        Pool.objects.get_or_create(name=name)
