from django.apps import AppConfig


class ConfigApp(AppConfig):
    """Registers the project-level management commands (``db``) and system checks."""

    name = "config"
    label = "leitstand_config"
    verbose_name = "Leitstand configuration"
