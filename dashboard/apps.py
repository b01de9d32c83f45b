from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The operations console: admin site, console pages, alerts and metrics."""

    name = "dashboard"
    verbose_name = "Console"
