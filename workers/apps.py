from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """Job-type registry, pools and handlers (crawl, analysis); built on jobs.leases."""

    name = "workers"
    verbose_name = "Workers"
