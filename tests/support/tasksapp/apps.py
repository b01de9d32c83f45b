from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    """A test app with Django ``@task`` functions (tests/processes/test_django_tasks.py): installed
    by config/test_settings.py only."""

    name = "tests.support.tasksapp"
    label = "tasksapp"
