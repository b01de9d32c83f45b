from django.apps import AppConfig


class ConfigApp(AppConfig):
    """Registers the project-level management commands (``db``, ``migrate``) and system checks."""

    name = "config"
    label = "leitstand_config"
    verbose_name = "Leitstand configuration"

    def ready(self):
        from django.conf import settings
        from django.db.models.signals import post_migrate

        from config import checks  # noqa: F401  (registers the timing-invariant checks)

        if settings.LEITSTAND_LOG_FORMAT == "json":  # no line of another shape (jobs/logs.py)
            from jobs.logs import capture_uncaught

            capture_uncaught()

        post_migrate.connect(_grants_after_migrating, dispatch_uid="leitstand-db-grants")


def _grants_after_migrating(sender, using="default", **kwargs):
    """Once per migrate run (post_migrate is sent per app; every table exists by then)."""
    if sender.label == "jobs":
        from config.db_roles import grants_apply

        grants_apply(using=using, **kwargs)
