from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class DashboardConfig(AppConfig):
    """The operations console: admin site, console pages, alerts and metrics."""

    default = True
    name = "dashboard"
    verbose_name = "Console"

    def ready(self):
        from dashboard.operations.registrations import runtime_register

        runtime_register()


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """Django's admin, with the console as ``admin.site``: every ``@admin.register`` lands on it."""

    default = False
    default_site = "dashboard.site.ConsoleSite"
