"""Following a thread's protocol-v2 log: replay from the database, then the live tail.

The log lives in the database (``ThreadStreamEvent``); the process's stream
bridge (memory, or Redis for several processes) carries each committed batch
to live subscribers under the key ``thread:<id>``. A follower notes the
bridge's newest id, replays ``seq > since`` from the database, then tails the
bridge from that id, skipping what it already sent and filling any hole from
the database. While idle it re-reads the database, so an event whose live
publish was lost (its process died, Redis blinked) still arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from channels.db import database_sync_to_async

from runs.selectors import thread_stream_bounds, thread_stream_since
from runs.streaming.bridge import ReplayGap, StreamBridge, dumps

logger = logging.getLogger(__name__)

HEARTBEAT = b": heartbeat\r\n\r\n"
_PAGE = 500


def thread_key(thread_id: str) -> str:
    return f"thread:{thread_id}"


class ResumeGap(Exception):
    """``since`` is older than the oldest event the log still keeps."""

    def __init__(self, since: int, min_available_seq: int) -> None:
        super().__init__(f"resume gap: since={since} is older than min_available_seq={min_available_seq}")
        self.since = since
        self.min_available_seq = min_available_seq

    def body(self) -> dict:
        return {
            "error": "resume_gap",
            "message": str(self),
            "since": self.since,
            "min_available_seq": self.min_available_seq,
        }


async def publish_thread_events(bridge: StreamBridge, thread_id: str, envelopes: list[dict]) -> None:
    """Hand committed log events to live followers in every process."""
    for event in envelopes:
        await bridge.publish(thread_key(thread_id), event["method"], event)


_since = database_sync_to_async(thread_stream_since)
_bounds = database_sync_to_async(thread_stream_bounds)


async def check_resume(thread_id: str, since: int | None) -> int:
    """Return the highest seq; raise ResumeGap when ``since`` predates what is kept."""
    low, high = await _bounds(thread_id=thread_id)
    if since is not None and low > 1 and since < low - 1:
        raise ResumeGap(since, low)
    return high


async def _replay(thread_id: str, since: int, until: int | None = None) -> AsyncIterator[dict]:
    while True:
        rows = await _since(thread_id=thread_id, since=since, until=until, limit=_PAGE)
        for row in rows:
            since = row["seq"]
            yield row
        if len(rows) < _PAGE:
            return


async def until_owned(
    bridge: StreamBridge,
    thread_id: str,
    is_owned: Callable[[], Awaitable[bool]],
    *,
    idle_timeout: float,
    recheck_seconds: float = 1.0,
) -> AsyncIterator[None]:
    """Return once ``is_owned()``; until then yield None every ``idle_timeout`` (a heartbeat).

    A client opens its stream on a thread id it minted before the ``run.start``
    that creates the thread, so a stream may precede its thread; a stream on
    another user's thread waits here the same way, forever, and the two cases
    look alike from outside. The wait wakes on the thread's live tail (the
    first events of the run that creates it, from any process) and re-checks
    every ``recheck_seconds`` in case that publish was lost.
    """
    key = thread_key(thread_id)
    loop = asyncio.get_running_loop()
    beat = loop.time()
    while True:
        position = await bridge.last_id(key)  # before the check: events after it wake the wait
        if await is_owned():
            return
        with contextlib.suppress(ReplayGap):
            async with contextlib.aclosing(bridge.subscribe(key, after=position, idle_timeout=recheck_seconds)) as tail:
                async for _ in tail:
                    break
        if loop.time() - beat >= idle_timeout:
            beat = loop.time()
            yield None


async def follow_thread(
    bridge: StreamBridge, thread_id: str, *, since: int | None, idle_timeout: float
) -> AsyncIterator[dict | None]:
    """Yield the log's envelopes with ``seq > since`` (all when None), forever; None while idle."""
    last = since or 0
    key = thread_key(thread_id)
    while True:
        position = await bridge.last_id(key)
        async for row in _replay(thread_id, last):
            last = row["seq"]
            yield row
        try:
            async for event in bridge.subscribe(key, after=position, idle_timeout=idle_timeout):
                if event is None:
                    async for row in _replay(thread_id, last):
                        last = row["seq"]
                        yield row
                    yield None
                    continue
                seq = event.data["seq"]
                if seq <= last:
                    continue
                if seq > last + 1:  # published out of order or trimmed: the database has them
                    async for row in _replay(thread_id, last, until=seq):
                        last = row["seq"]
                        yield row
                last = seq
                yield event.data
        except ReplayGap:
            logger.info("thread %s: live tail fell out of the bridge window; replaying from the log", thread_id)


def sse_frame(event: dict) -> bytes:
    """Return one protocol SSE frame: ``event:`` the method, ``data:`` the envelope, ``id:`` the seq."""
    return f"event: {event['method']}\r\ndata: {dumps(event)}\r\nid: {event['seq']}\r\n\r\n".encode()


def sse_error_frame(body: dict) -> bytes:
    return f"event: error\r\ndata: {dumps({'type': 'error', 'id': None, **body})}\r\n\r\n".encode()


# -- the classic thread join stream (GET /threads/{id}/stream) -----------------

JOIN_MODES = ("run_modes", "lifecycle", "state_update")
# Log channels a run's classic stream_mode names (messages-tuple arrives as "messages").
_CLASSIC = {
    "values": "values",
    "updates": "updates",
    "custom": "custom",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}


class JoinTranslator:
    """Turn log events back into the LangGraph Platform's run-stream events, per run's stream_mode."""

    def __init__(self, modes: set[str], run_modes_of) -> None:
        self.modes = modes
        self._run_modes_of = run_modes_of  # async run_id -> set of the run's stream modes
        self._message_ids: dict[tuple, str | None] = {}

    async def frames(self, event: dict, run_id: str) -> list[tuple[str, object]]:
        method, params = event["method"], event["params"]
        if method == "state_update":  # POST /threads/{id}/state, no run's
            return [("state_update", params.get("data"))] if "state_update" in self.modes else []
        data, namespace = params.get("data"), params.get("namespace") or []
        if method == "lifecycle" and not namespace:
            phase = (data or {}).get("event")
            if "lifecycle" not in self.modes and "run_modes" not in self.modes:
                return []
            if phase == "running":
                return [("metadata", {"run_id": run_id, "status": "running"})]
            return [
                (
                    "metadata",
                    {"run_id": run_id, "status": "run_done", "outcome": phase, "error": (data or {}).get("error")},
                )
            ]
        if "run_modes" not in self.modes or namespace:
            return []
        run_modes = await self._run_modes_of(run_id)
        if method in _CLASSIC and method in run_modes:
            return [(method, data)]
        if method == "messages" and {"messages", "messages-tuple"} & run_modes:
            return self._message(tuple(namespace), data or {})
        return []

    def _message(self, namespace: tuple, data: dict) -> list[tuple[str, object]]:
        if data.get("event") == "message-start":
            self._message_ids[namespace] = data.get("id")
        elif (
            data.get("event") == "content-block-delta"
            and (delta := data.get("delta") or {}).get("type") == "text-delta"
        ):
            chunk = {"type": "AIMessageChunk", "content": delta.get("text", ""), "id": self._message_ids.get(namespace)}
            return [("messages", [chunk, {}])]
        return []
