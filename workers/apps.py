from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """The runtime (``workers.runtime``) and the pipeline (``workers.pipeline``): one Django app, so their
    tables keep the ``workers_`` names; the models live beside the code that owns them."""

    name = "workers"
    verbose_name = "Workers"

    def ready(self):
        from django.conf import settings
        from django.db.models.signals import post_migrate
        from django_q.signals import post_spawn

        from jobs.options import options_follow
        from workers.pipeline import job_types as pipeline_types
        from workers.pipeline import options as pipeline_options
        from workers.pipeline import schedule_sweep
        from workers.runtime import control, options
        from workers.runtime import job_types as runtime_types

        # The one place the runtime and the pipeline read Django's settings (job types keep the timing
        # they were registered with when a test overrides one).
        options_follow(options, options.RuntimeOptions, settings)
        options_follow(pipeline_options, pipeline_options.PipelineOptions, settings)
        # A duplicate or incomplete declaration stops start-up here.
        runtime_types.job_types_register()
        pipeline_types.job_types_register()
        control.sweeps_register()
        schedule_sweep.register()
        # Every installed app's @task functions become job types here (their tasks modules
        # imported), so a pool process knows every task it may claim.
        from workers.runtime.tasks import tasks_discover

        tasks_discover(getattr(settings, "TASKS", {}) or {})

        # Webhooks to receivers people set go through the safe client (the runtime cannot import it).
        from workers.pipeline.http import notification_client
        from workers.runtime.webhook import guarded_post_register

        guarded_post_register(
            lambda url, body, headers, timeout, propagate=False: notification_client(timeout).post(
                url, body=body, headers=headers, propagate=propagate
            )
        )
        post_migrate.connect(_pools_ensure, sender=self)
        post_spawn.connect(_worker_spawned)


def _worker_spawned(**kwargs):
    """A django-q2 worker process of one of our pools starts: register it and start its heartbeat
    thread now, so an idle pool shows its live consumers before its first wake-up."""
    import os

    from workers.runtime import options
    from workers.runtime.pool import PoolRuntime

    pool = os.environ.get("Q_CLUSTER_NAME")
    if pool in options.current().pools:
        PoolRuntime.for_pool(pool).start()


def _pools_ensure(**kwargs):
    """Every configured pool has a row, so the console can show and pause each of them."""
    from workers.runtime import options
    from workers.runtime.models import Pool

    for name in options.current().pools:
        Pool.objects.get_or_create(name=name)
