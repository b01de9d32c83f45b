from django.apps import AppConfig


class RechecksConfig(AppConfig):
    """Recheck plans and their interval policy; follows up every match the analysis reports."""

    name = "rechecks"
    verbose_name = "Rechecks"

    def ready(self):
        from django.conf import settings

        from jobs.options import follow_settings
        from rechecks import options
        from rechecks.registrations import match_followup, runtime_register

        # The one place the rechecks read Django's settings (rechecks/options.py): a refusal stops
        # start-up here, naming the setting; a test that overrides one gets them read again.
        follow_settings(
            options.SETTINGS,
            lambda: options.configure(options.RecheckOptions.from_settings(settings)),
            uid="rechecks.options",
        )
        from workers.runtime.hooks import match_reported

        runtime_register()
        match_reported.connect(match_followup, dispatch_uid="rechecks.match_followup")
