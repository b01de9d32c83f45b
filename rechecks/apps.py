from django.apps import AppConfig


class RechecksConfig(AppConfig):
    """Recheck plans and their interval policy; follows up every match the analysis reports."""

    name = "rechecks"
    verbose_name = "Rechecks"

    def ready(self):
        from rechecks.registrations import match_followup, runtime_register
        from workers.runtime.hooks import match_reported

        runtime_register()
        match_reported.connect(match_followup, dispatch_uid="rechecks.match_followup")
