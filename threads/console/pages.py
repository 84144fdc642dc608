"""Register the console's checkpoint pages on the admin site (imported by ThreadsConfig.ready)."""

from __future__ import annotations

from core.admin_site import ConsolePage, console_site
from threads.console.checkpoints import VIEW_PERMISSION, checkpoint_view, lineage_view
from threads.console.retention import retention_preview_view, storage_view


def _page(route: str, url_name: str, title: str, view, *, listed: bool = False) -> ConsolePage:
    return ConsolePage(
        app_label="checkpoints",
        app_name="Checkpoints",
        route=route,
        url_name=url_name,
        title=title,
        view=view,
        permission=VIEW_PERMISSION,
        listed=listed,
    )


PAGES = [
    _page("checkpoints/threads/<str:thread_id>/lineage/", "checkpoints_lineage", "Checkpoint lineage", lineage_view),
    _page(
        "checkpoints/threads/<str:thread_id>/checkpoints/<str:checkpoint_id>/",
        "checkpoints_checkpoint",
        "Checkpoint",
        checkpoint_view,
    ),
    _page("checkpoints/retention/", "checkpoints_retention_preview", "Retention preview", retention_preview_view),
    _page("checkpoints/storage/", "checkpoints_storage", "Checkpoint storage", storage_view, listed=True),
]


def register() -> None:
    for page in PAGES:
        console_site().register_page(page)
