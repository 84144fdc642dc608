"""SSE framing (the LangGraph Platform layout) and waiting for a run's outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async

from runs.models import UNFINISHED_STATUSES, Run
from runs.streaming.bridge import END_EVENT, ReplayGap, StreamBridge, dumps

logger = logging.getLogger(__name__)

OPENING = b": ok\r\n\r\n"
HEARTBEAT = b": heartbeat\r\n\r\n"


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    """Return one SSE frame: ``event:``, ``data:`` and (when known) ``id:`` lines."""
    lines = [f"event: {event}", f"data: {dumps(data)}"]
    if event_id:
        lines.append(f"id: {event_id}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _run_finished(run_id: str) -> bool:
    return not Run.objects.filter(pk=run_id, status__in=UNFINISHED_STATUSES).exists()


async def sse_stream(
    bridge: StreamBridge,
    run: Run,
    *,
    after: str | None,
    heartbeat: float,
    modes: set[str] | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """Yield a run's events as SSE until its end, with heartbeats while idle.

    The opening comment forces daphne to send the headers at once (it holds
    them until the first body chunk). A client disconnect arrives here as
    CancelledError; ``on_disconnect`` then applies the run's policy.
    """
    yield OPENING
    try:
        async for event in bridge.subscribe(run.run_id, after=after, idle_timeout=heartbeat):
            if event is None:
                # Idle and finished: the stream expired or never reached this
                # bridge (the END marker follows finalization within ms).
                if await database_sync_to_async(_run_finished)(run.run_id):
                    return
                yield HEARTBEAT
                continue
            if event.event == END_EVENT:
                return
            if modes is None or event.event.split("|")[0] in modes or event.event in ("metadata", "error"):
                yield frame(event.event, event.data, event.id)
    except ReplayGap as gap:
        yield frame(
            "gap",
            {
                "code": "stream_replay_gap",
                "run_id": run.run_id,
                "requested_event_id": gap.requested,
                "earliest_available_event_id": gap.earliest,
                "recovery": "reload_durable_state",
            },
        )
    except asyncio.CancelledError:
        if on_disconnect is not None:
            await asyncio.shield(on_disconnect())
        raise


async def run_outcome(bridge: StreamBridge, run: Run, *, idle: float = 1.0) -> dict[str, Any] | None:
    """Wait for the run's terminal marker and return its outcome; None if the stream is gone."""
    async for event in bridge.subscribe(run.run_id, after=None, idle_timeout=idle):
        if event is None:
            if await database_sync_to_async(_run_finished)(run.run_id):
                return None
            continue
        if event.event == END_EVENT:
            return event.data
    return None


def outcome_body(outcome: dict[str, Any]) -> dict[str, Any]:
    """Return what ``/wait`` and ``/join`` answer: the final values, or the error.

    An error carries the LangGraph Platform's ``__error__`` (the SDK raises on
    it) and DeerFlow's ``{"status": "error", "error": …}``.
    """
    if outcome.get("status") == "error":
        name = outcome.get("error_name") or "RunError"
        message = outcome.get("error") or "run failed"
        return {"__error__": {"error": name, "message": message}, "status": "error", "error": message}
    return outcome.get("values") or {}
