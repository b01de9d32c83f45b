from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """Job-type registry, pools and handlers; built on jobs.leases."""

    name = "workers"
    verbose_name = "Workers"

    def ready(self):
        # Declarations register themselves; a duplicate or incomplete one stops start-up here.
        from workers import job_types  # noqa: F401
