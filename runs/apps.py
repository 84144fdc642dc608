from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Runs, run events, admission, execution, streaming and the journal."""

    name = "runs"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"
