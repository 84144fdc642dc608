from django.apps import AppConfig


class ThreadsConfig(AppConfig):
    """Thread metadata, thread routes, state and history."""

    name = "threads"
    verbose_name = "Threads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # threads/admin.py holds the model admins; the console's checkpoint pages register here.
        from threads.console.pages import register

        register()
