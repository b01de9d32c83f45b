from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        # The one place the engine reads Django's settings (jobs/options.py); a test that overrides
        # one of them gets the engine's options read again.
        from django.conf import settings

        from jobs import options, tracing

        def configure():
            try:
                options.configure(options.EngineOptions.from_settings(settings))
            except options.OptionError:
                pass  # reported by the system checks (config/checks.py, leitstand.E009), naming the setting

        options.follow_settings(options.SETTINGS, configure, uid="jobs.options")

        # Spans are recorded and exported only when the standard OTEL_* environment names a collector
        # (docs/operations.md, "Traces"); an export this build cannot make stops the start, named.
        tracing.configure_from_environment()
