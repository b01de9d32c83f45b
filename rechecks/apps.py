from django.apps import AppConfig


class RechecksConfig(AppConfig):
    """Recheck plans and their interval policy; follows up every match the analysis reports."""

    name = "rechecks"
    verbose_name = "Rechecks"

    def ready(self):
        from django.conf import settings

        from jobs.options import options_follow
        from rechecks import options
        from rechecks.registrations import match_followup, runtime_register

        options_follow(options, options.RecheckOptions, settings)  # the one place the rechecks read them
        from workers.runtime.hooks import match_reported

        runtime_register()
        match_reported.connect(match_followup, dispatch_uid="rechecks.match_followup")
