from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API v1 and its tokens."""

    name = "api"
    verbose_name = "API"
