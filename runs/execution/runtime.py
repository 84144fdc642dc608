"""The process's run worker on the serving loop (its stream bridge: ``core.bridge_runtime``).

Started, it is plugged into ``runs.dispatch``, the port the run services reach it through.
"""

from __future__ import annotations

from django.conf import settings

from core.bridge_runtime import start_bridge
from runs import dispatch
from runs.execution.worker import RunWorker


async def start_worker(*, claim: bool | None = None) -> RunWorker:
    """Start this process's worker and plug it in (idempotent); ``claim`` defaults to runs.execute_in_server."""
    if (running := dispatch.current()) is not None:
        return running  # type: ignore[return-value]
    runs = settings.DEERFLOW_CONFIG.runs
    worker = RunWorker(
        bridge=start_bridge(),
        claim=runs.execute_in_server if claim is None else claim,
        capacity=runs.capacity,
        poll_seconds=runs.poll_seconds,
        lease_seconds=runs.lease_seconds,
    )
    await worker.start()
    dispatch.plug(worker)
    return worker


def current_worker() -> RunWorker | None:
    """This process's worker (the plugged executor, with the execution side's own API), or None."""
    return dispatch.current()  # type: ignore[return-value]


def get_worker() -> RunWorker:
    """This process's worker; 503 where start-up started none."""
    return dispatch.get()  # type: ignore[return-value]


async def stop_worker() -> None:
    """Unplug this process's worker and stop it; the webhooks of the runs it ends still go out through it."""
    worker = dispatch.unplug()
    if worker is None:
        return
    try:
        await worker.aclose()  # type: ignore[attr-defined]
    finally:
        dispatch.closed()
