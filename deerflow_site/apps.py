from django.apps import AppConfig


class SiteConfig(AppConfig):
    """Site-wide pieces: API keys, authentication, configuration checks."""

    name = "deerflow_site"
    label = "deerflow_site"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from deerflow_site import db, schema  # noqa: F401  (jsoncontains lookup, OpenAPI auth extension)
