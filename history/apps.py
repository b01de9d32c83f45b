from django.apps import AppConfig


class HistoryConfig(AppConfig):
    """The history: retention, the archive and its index, the export of a job, the partitions, and the
    purge of the rows every app below it keeps."""

    name = "history"
    verbose_name = "History"

    def ready(self):
        from django.conf import settings

        from history import options
        from history.registrations import runtime_register
        from jobs.options import follow_settings

        # The one place the history reads Django's settings (history/options.py): a refusal stops
        # start-up here, naming the setting; a test that overrides one gets them read again.
        follow_settings(
            options.SETTINGS,
            lambda: options.configure(options.RetentionOptions.from_settings(settings)),
            uid="history.options",
        )
        runtime_register()
