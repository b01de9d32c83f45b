from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API v1 and its tokens."""

    name = "api"
    verbose_name = "API"

    def ready(self):
        from django.conf import settings

        from alerts.alert_rules import rule_register
        from api import options
        from api.alert_rules import SUBMISSIONS_REFUSED
        from jobs.options import options_follow

        options_follow(options, options.ApiOptions, settings)  # the one place the API reads them
        rule_register(SUBMISSIONS_REFUSED)
