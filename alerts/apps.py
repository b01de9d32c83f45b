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
        from jobs.options import options_follow

        options_follow(options, options.AlertingOptions, settings)  # the one place alerting reads them
        runtime_register()
