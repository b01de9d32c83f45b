from django.apps import AppConfig


class ConfigApp(AppConfig):
    """Registers the project-level management commands (``db``) and system checks."""

    name = "config"
    label = "leitstand_config"
    verbose_name = "Leitstand configuration"

    def ready(self):
        from config import checks  # noqa: F401  (registers the timing-invariant checks)
