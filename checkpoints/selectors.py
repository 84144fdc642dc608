"""Reads about the checkpoint layer itself (configuration, counters)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from checkpoints.backend import current_backend
from checkpoints.history_cache import process_stats, resolved_key_prefix
from checkpoints.modes import process_mode
from checkpoints.state_cache import state_cache


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


def state_cache_info() -> dict[str, Any]:
    """Describe the encoded-state cache (``checkpoints.state_cache``): its bound, size and counters."""
    max_mb = settings.DEERFLOW_CONFIG.database.checkpoint_state_cache.max_mb
    stats = state_cache.stats()
    return {
        "enabled": max_mb > 0 and current_backend().kind != "memory",
        "max_mb": max_mb,
        "entries": stats.pop("entries"),
        "bytes": stats.pop("bytes"),
        "counters": stats,
    }


def checkpoint_info() -> dict[str, Any]:
    """Return the backend, the frozen mode and cadence, and both caches, for /info and the admin."""
    mode, frequency = process_mode()
    return {
        "backend": current_backend().kind,
        "channel_mode": mode,
        "snapshot_frequency": frequency,
        "history_cache": history_cache_info(mode),
        "state_cache": state_cache_info(),
    }
