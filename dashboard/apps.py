from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class DashboardConfig(AppConfig):
    """The operations console: admin site, console pages, their selectors, the snapshot and metrics."""

    default = True
    name = "dashboard"
    verbose_name = "Console"

    def ready(self):
        from django.conf import settings

        from dashboard import options
        from dashboard.operations.registrations import runtime_register
        from jobs.options import options_follow

        # The one place the console reads LEITSTAND_CONSOLE and /metrics' settings (dashboard/options.py).
        options_follow(options, options.ConsoleOptions, settings)

        runtime_register()


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """Django's admin, with the console as ``admin.site``: every ``@admin.register`` lands on it."""

    default = False
    default_site = "dashboard.site.ConsoleSite"
