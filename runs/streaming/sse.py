"""SSE framing (the LangGraph Platform layout; the thread log's protocol frames) and waiting for a run's outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from core.bridge import END_EVENT, ReplayGap, StreamBridge, dumps, from_start
from runs.models import Run
from threads.models import UNFINISHED_STATUSES

logger = logging.getLogger(__name__)

OPENING = b": ok\r\n\r\n"
HEARTBEAT = b": heartbeat\r\n\r\n"


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    """Return one SSE frame: ``event:``, ``data:`` and (when known) ``id:`` lines."""
    lines = [f"event: {event}", f"data: {dumps(data)}"]
    if event_id:
        lines.append(f"id: {event_id}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def sse_frame(event: dict) -> bytes:
    """Return one protocol SSE frame: ``event:`` the method, ``data:`` the envelope, ``id:`` the seq."""
    return f"event: {event['method']}\r\ndata: {dumps(event)}\r\nid: {event['seq']}\r\n\r\n".encode()


def sse_error_frame(body: dict) -> bytes:
    """Return a protocol SSE ``error`` frame (a resume gap, a stream that broke), which ends the stream."""
    return f"event: error\r\ndata: {dumps({'type': 'error', 'id': None, **body})}\r\n\r\n".encode()


METADATA_EVENT = "metadata"


def run_metadata(run: Run) -> dict[str, Any]:
    """Return the ``metadata`` event that opens a run's stream read from its start.

    Every reader sends it first itself rather than finding it in the bridge:
    a stored one raced the run, whose first events could be published (by
    any process that claimed it) before the admitting process's own publish
    of it landed, and clients read a stream's first event as its metadata.
    """
    return {"run_id": run.run_id, "thread_id": run.thread_id, "attempt": 1}


def run_finished(run_id: str) -> bool:
    return not Run.objects.filter(pk=run_id, status__in=UNFINISHED_STATUSES).exists()


# How long a reader of a run that had already ended waits for more of its stream:
# nothing more comes (it holds its end marker, or it never will: the run ended
# before it started, or the stream expired), or its end marker is on its way.
ENDED_IDLE_SECONDS = 0.05
# How long after the run's row says it ended an idle reader still waits for the end
# marker: finalize commits the row, then publishes the run's last events and the
# marker, which under load takes a while. A reader that stopped at the row missed
# them (a WebSocket join of a just-finished run ended without its "end" event).
END_MARKER_GRACE_SECONDS = 2.0


def _end_seen_by(run_id: str) -> datetime | None:
    """When an idle reader of the run may stop without its end marker (None: the run has not ended)."""
    row = Run.objects.filter(pk=run_id).values_list("status", "started_at", "finished_at").first()
    if row is None:
        return timezone.now()
    status, started_at, finished_at = row
    if status in UNFINISHED_STATUSES:
        return None
    if started_at is None or finished_at is None:  # it never streamed: no marker will come
        return timezone.now()
    return finished_at + timedelta(seconds=END_MARKER_GRACE_SECONDS)


class RunEndWatch:
    """For an idle reader of a run's stream: whether it may stop without the end marker.

    Only once the run's row says it ended and the marker had time to follow
    (``END_MARKER_GRACE_SECONDS``); the row is read until it says so, then
    the clock alone decides.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._stop_at: datetime | None = None

    @property
    def ended(self) -> bool:
        """Whether the row said the run ended (the reader is waiting out the marker's grace)."""
        return self._stop_at is not None

    async def over(self) -> bool:
        if self._stop_at is None:
            self._stop_at = await database_sync_to_async(_end_seen_by)(self.run_id)
            if self._stop_at is None:
                return False
        return timezone.now() >= self._stop_at


def reader_idle_timeout(run: Run, idle: float) -> float:
    """``idle``, or no wait for a run that had ended when it was read (a join of it answers at once)."""
    return ENDED_IDLE_SECONDS if run.status not in UNFINISHED_STATUSES else idle


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

    The opening comment is a first body byte at once: a server or proxy that
    holds the headers until the first body chunk passes them on without
    waiting for the run's first event. A client disconnect arrives here as
    CancelledError; ``on_disconnect`` then applies the run's policy.
    """
    yield OPENING
    if from_start(after):
        yield frame(METADATA_EVENT, run_metadata(run))
    watch = RunEndWatch(run.run_id)
    try:
        async for event in bridge.subscribe(run.run_id, after=after, idle_timeout=reader_idle_timeout(run, heartbeat)):
            if event is None:
                # Idle and finished: the stream expired or never reached this
                # bridge, once the END marker had time to follow finalization.
                if await watch.over():
                    return
                if not watch.ended:  # a run still going: keep the connection warm
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
    except Exception as exc:
        # The bridge failed past its retry (Redis away): end with an error
        # frame, never a stream that silently stops. The run itself goes on;
        # ``GET …/stream`` with Last-Event-ID resumes once the bridge is back.
        logger.warning("run %s: SSE stream interrupted", run.run_id, exc_info=True)
        yield frame("error", interrupted(exc))


def interrupted(exc: BaseException) -> dict[str, str]:
    """Return the error frame's data for a stream cut by the bridge."""
    message = f"The event stream was interrupted ({type(exc).__name__}: {exc}); reconnect to resume."
    return {"message": message, "name": "StreamInterrupted", "error": "StreamInterrupted"}


async def run_outcome(bridge: StreamBridge, run: Run, *, idle: float = 1.0) -> dict[str, Any] | None:
    """Wait for the run's terminal marker and return its outcome; None if the stream is gone.

    When the bridge fails, the run row decides: wait until it is final, then
    return None (the caller reads the outcome from the row and the checkpoint).
    """
    try:
        async for event in bridge.subscribe(run.run_id, after=None, idle_timeout=reader_idle_timeout(run, idle)):
            if event is None:
                if await database_sync_to_async(run_finished)(run.run_id):
                    return None
                continue
            if event.event == END_EVENT:
                return event.data
    except ReplayGap:
        pass
    except Exception:
        logger.warning("run %s: the bridge failed; waiting on the run row", run.run_id, exc_info=True)
    while not await database_sync_to_async(run_finished)(run.run_id):  # noqa: ASYNC110 (a database poll, no event to await)
        await asyncio.sleep(idle)
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
