from django.apps import AppConfig


class AlertsConfig(AppConfig):
    """Alerting: the rules over the pipeline's records, the alerts they open, routes with owners and
    contacts, notifications, tested receipt, silences and the business rules across jobs."""

    name = "alerts"
    verbose_name = "Alerts"

    def ready(self):
        from django.conf import settings

        from alerts import options
        from alerts.registrations import runtime_register
        from jobs.options import follow_settings

        # The one place alerting reads Django's settings (alerts/options.py): a refusal stops start-up
        # here, naming the setting; a test that overrides one gets them read again.
        follow_settings(
            options.SETTINGS,
            lambda: options.configure(options.AlertingOptions.from_settings(settings)),
            uid="alerts.options",
        )
        runtime_register()
