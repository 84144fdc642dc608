"""The console's checkpoint settings page: backend, frozen channel mode and cadence, cache counters."""

from __future__ import annotations

from checkpoints.selectors import checkpoint_info
from console.checkpoints import checkpoint_page
from core.admin_site import console_render, console_site


def checkpoint_settings_view(request):
    """Show the backend, the frozen channel mode and cadence, the history cache counters, and other apps' health panels."""

    info = checkpoint_info()
    context = {"title": "Checkpoint settings", "info": info, "panels": console_site().health_panels(request)}
    return console_render(request, "admin/checkpoints/settings.html", context)


PAGE = checkpoint_page(
    "checkpoints/settings/",
    "checkpoints_settings",
    "Checkpoint settings",
    checkpoint_settings_view,
    listed=True,
    permission=None,
)
