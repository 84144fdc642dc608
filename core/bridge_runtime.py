"""The process's stream bridge: one per process, whether or not it executes runs.

It lives in ``core`` because every layer above hands events to it: ``threads``
publishes its log's live tail and a thread's deletion, ``runs`` its streams.

A server that only admits and streams (``runs.execute_in_server: false``)
still publishes each run's ``metadata`` event and relays every stream; a
``run_workers`` process publishes what it executes. The bridge is built at
start-up (``deerflow_site.lifecycle``) and closed at shutdown, after the
worker that publishes into it.
"""

from __future__ import annotations

from django.conf import settings

from core.bridge import MemoryStreamBridge, RedisStreamBridge, StreamBridge
from core.errors import Unavailable

_bridge: StreamBridge | None = None


def build_bridge() -> StreamBridge:
    """Return the bridge the configuration selects (memory: one process; redis: any)."""
    config = settings.DEERFLOW_CONFIG
    if config.stream_bridge.type == "redis":
        return RedisStreamBridge(
            config.redis.resolved_url(),
            max_events=config.stream_bridge.max_events,
            ttl_seconds=config.stream_bridge.stream_ttl_seconds,
        )
    return MemoryStreamBridge(max_events=config.stream_bridge.max_events)


def start_bridge() -> StreamBridge:
    """Build this process's bridge (idempotent)."""
    global _bridge
    if _bridge is None:
        _bridge = build_bridge()
    return _bridge


def get_bridge() -> StreamBridge:
    """Return this process's bridge; 503 where start-up has not built it."""
    if _bridge is None:
        raise Unavailable("The stream bridge is not running in this process.")
    return _bridge


async def aclose_bridge() -> None:
    global _bridge
    if _bridge is not None:
        bridge, _bridge = _bridge, None
        await bridge.aclose()
