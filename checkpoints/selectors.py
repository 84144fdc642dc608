"""Reads about the checkpoint layer itself (configuration, counters)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from checkpoints.backend import current_backend
from checkpoints.history_cache import process_stats, resolved_key_prefix
from checkpoints.modes import process_mode


def history_cache_info(mode: str) -> dict[str, Any]:
    """Describe the delta history cache and its process-wide counters.

    The counters add up every saver of the process (sync views, each event
    loop, each run); they stay zero in full mode, where nothing is cached.
    """
    cache = settings.DEERFLOW_CONFIG.database.checkpoint_cache
    info: dict[str, Any] = {
        "type": cache.type,
        "enabled": mode == "delta" and (cache.type == "redis" or cache.max_entries > 0),
        "key_prefix": resolved_key_prefix(cache, current_backend()),
        "counters": process_stats.snapshot(),
    }
    if cache.type == "memory":
        info["max_entries"] = cache.max_entries
    else:
        info["ttl_seconds"] = cache.ttl_seconds
    return info


def checkpoint_info() -> dict[str, Any]:
    """Return the backend, the frozen mode and cadence, and the history cache, for /info and the admin."""
    mode, frequency = process_mode()
    return {
        "backend": current_backend().kind,
        "channel_mode": mode,
        "snapshot_frequency": frequency,
        "history_cache": history_cache_info(mode),
    }
