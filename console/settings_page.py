"""The console's checkpoint settings page: backend, frozen channel mode and cadence, cache counters."""

from __future__ import annotations

from django.contrib import admin
from django.template.response import TemplateResponse

from checkpoints.selectors import checkpoint_info
from core.admin_site import ConsolePage, console_site


def checkpoint_settings_view(request):
    """Show the backend, the frozen channel mode and cadence, the history cache counters, and other apps' health panels."""

    info = checkpoint_info()
    context = {
        **admin.site.each_context(request),
        "title": "Checkpoint settings",
        "info": info,
        "panels": console_site().health_panels(request),
    }
    return TemplateResponse(request, "admin/checkpoints/settings.html", context)


PAGE = ConsolePage(
    app_label="checkpoints",
    app_name="Checkpoints",
    route="checkpoints/settings/",
    url_name="checkpoints_settings",
    title="Checkpoint settings",
    view=checkpoint_settings_view,
)
