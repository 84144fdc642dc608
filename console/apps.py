from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The support console's pages; ``console.admin`` registers them when the admin autodiscovers."""

    name = "console"
    verbose_name = "Console"
