from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _setup_langgraph_tables(sender, using="default", **kwargs) -> None:
    """Create or upgrade LangGraph's tables whenever Django's are migrated.

    The savers' own ``setup()`` owns that schema (and its migration table);
    Django migrations never describe it.
    """
    if using != "default":
        return
    # The runtime module loads the savers: imported when migrate's signal fires, not at app loading.
    from checkpoints.runtime import setup_tables

    setup_tables()


class CheckpointsConfig(AppConfig):
    """Channel modes, savers and Stores, the state accessor, history cache and retention."""

    name = "checkpoints"
    verbose_name = "Checkpoints"

    def ready(self) -> None:
        # Django's convention: what ready() wires up is imported there, once the apps are loaded.
        from checkpoints import checks  # noqa: F401  (registers system checks)
        from checkpoints.reducer import install_write_time_message_ids

        install_write_time_message_ids()

        post_migrate.connect(_setup_langgraph_tables, sender=self, dispatch_uid="checkpoints-setup")
