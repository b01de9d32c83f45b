from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API v1 and its tokens."""

    name = "api"
    verbose_name = "API"

    def ready(self):
        # The one place the API reads Django's settings (api/options.py): a refusal stops start-up
        # here, naming the setting; a test that overrides one gets them read again.
        from django.conf import settings

        from alerts.alert_rules import rule_register
        from api import options
        from api.alert_rules import SUBMISSIONS_REFUSED
        from jobs.options import follow_settings

        follow_settings(
            options.SETTINGS, lambda: options.configure(options.ApiOptions.from_settings(settings)), uid="api.options"
        )
        rule_register(SUBMISSIONS_REFUSED)
