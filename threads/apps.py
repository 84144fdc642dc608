from django.apps import AppConfig


class ThreadsConfig(AppConfig):
    """Thread metadata, thread routes, state and history."""

    name = "threads"
    verbose_name = "Threads"
    default_auto_field = "django.db.models.BigAutoField"
