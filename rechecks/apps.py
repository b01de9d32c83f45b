from django.apps import AppConfig


class RechecksConfig(AppConfig):
    """Recheck plans and their interval policy."""

    name = "rechecks"
    verbose_name = "Rechecks"
