from django.apps import AppConfig


class SiteConfig(AppConfig):
    """Site-wide pieces: API keys, authentication, configuration checks."""

    name = "deerflow_site"
    label = "deerflow_site"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported for their side effects: the jsoncontains lookup, the OpenAPI auth extension.
        from core import db  # noqa: F401
        from deerflow_site import schema  # noqa: F401
