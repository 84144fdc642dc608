from django.apps import AppConfig


class StoreConfig(AppConfig):
    """The LangGraph Store as clients see it: per-user roots, the /store routes and the console's items page.

    LangGraph owns the Store's tables; the backend that opens them (one pool
    with the checkpointer) is ``checkpoints.runtime``'s, so this app sits
    right above ``checkpoints``.
    """

    name = "store"
    verbose_name = "Store"
