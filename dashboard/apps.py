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
        from jobs.options import follow_settings

        # The one place the console reads LEITSTAND_CONSOLE and /metrics' settings (dashboard/options.py):
        # a refusal stops start-up here, naming the setting; a test that overrides one gets them read again.
        follow_settings(
            options.SETTINGS,
            lambda: options.configure(options.ConsoleOptions.from_settings(settings)),
            uid="dashboard.options",
        )
        from dashboard.operations.registrations import runtime_register

        runtime_register()


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """Django's admin, with the console as ``admin.site``: every ``@admin.register`` lands on it."""

    default = False
    default_site = "dashboard.site.ConsoleSite"
