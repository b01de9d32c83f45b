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
        from jobs.options import options_follow

        options_follow(options, options.RetentionOptions, settings)  # the one place the history reads them
        runtime_register()
