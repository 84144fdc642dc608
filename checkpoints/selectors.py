"""Reads about the checkpoint layer itself (configuration, counters)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from checkpoints.backend import current_backend
from checkpoints.modes import process_mode


def checkpoint_info() -> dict[str, Any]:
    """Return the backend, the frozen mode and cadence, for /info and the admin."""
    mode, frequency = process_mode()
    cache = settings.DEERFLOW_CONFIG.database.checkpoint_cache
    return {
        "backend": current_backend().kind,
        "channel_mode": mode,
        "snapshot_frequency": frequency,
        "history_cache": {
            "type": cache.type,
            "enabled": mode == "delta" and (cache.type == "redis" or cache.max_entries > 0),
        },
    }
