"""The site's one page outside the API and the console: where to go from here."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import render


def landing(request):
    """Link the API docs, the console and the health check, with what this process serves."""
    return render(
        request,
        "landing.html",
        {
            "graphs": sorted({"lead_agent", *settings.DEERFLOW["GRAPHS"]}),
            "mode": settings.DEERFLOW_CONFIG.database.checkpoint_channel_mode,
            "backend": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        },
    )
