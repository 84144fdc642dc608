"""The process's run machinery: one stream bridge and one worker on the serving loop."""

from __future__ import annotations

from django.conf import settings

from runs.execution.worker import RunWorker
from runs.streaming.bridge import MemoryStreamBridge, RedisStreamBridge, StreamBridge

_worker: RunWorker | None = None


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


async def start_worker(*, claim: bool | None = None) -> RunWorker:
    """Start this process's worker (idempotent); ``claim`` defaults to runs.execute_in_server."""
    global _worker
    if _worker is None:
        runs = settings.DEERFLOW_CONFIG.runs
        worker = RunWorker(
            bridge=build_bridge(),
            claim=runs.execute_in_server if claim is None else claim,
            capacity=runs.capacity,
            poll_seconds=runs.poll_seconds,
            lease_seconds=runs.lease_seconds,
        )
        await worker.start()
        _worker = worker
    return _worker


def current_worker() -> RunWorker | None:
    """Return this process's worker, None when none was started (a command, the admin under WSGI)."""
    return _worker


def get_worker() -> RunWorker:
    if _worker is None:
        raise RuntimeError("the run worker is not started (deerflow_site.lifecycle.startup)")
    return _worker


async def stop_worker() -> None:
    global _worker
    if _worker is not None:
        worker, _worker = _worker, None
        await worker.aclose()
        await worker.bridge.aclose()
