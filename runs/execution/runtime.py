"""The process's run worker on the serving loop (its stream bridge: ``runs.streaming.runtime``)."""

from __future__ import annotations

from django.conf import settings

from core.errors import Unavailable
from runs.execution.worker import RunWorker
from runs.streaming.runtime import start_bridge

_worker: RunWorker | None = None
# The worker being stopped: runs it cancels still end, and their webhooks go through it.
_closing: RunWorker | None = None


async def start_worker(*, claim: bool | None = None) -> RunWorker:
    """Start this process's worker (idempotent); ``claim`` defaults to runs.execute_in_server."""
    global _worker
    if _worker is None:
        runs = settings.DEERFLOW_CONFIG.runs
        worker = RunWorker(
            bridge=start_bridge(),
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
    """Return this process's worker; 503 where start-up has not started one."""
    if _worker is None:
        raise Unavailable("The run worker is not running in this process.")
    return _worker


def webhook_worker() -> RunWorker | None:
    """Return the worker that sends this process's webhooks: the running one, else the one shutting down."""
    return _worker or _closing


async def stop_worker() -> None:
    global _worker, _closing
    if _worker is not None:
        worker, _worker = _worker, None
        _closing = worker
        try:
            await worker.aclose()
        finally:
            _closing = None
