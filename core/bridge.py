"""The stream bridge: how a run's events reach every subscriber, in any process.

Transport only, keyed by a name (a run's id, ``thread:<id>`` for a thread's
log tail): it knows nothing of runs or threads, so both can publish into it.
Each key has an append-only event log with unique, monotonic ids, a bounded
replay window and a terminal marker. The memory bridge serves one process
(the embedded default); the Redis bridge keeps the log in a Redis Stream, so a
run executing in one process is streamed, joined and replayed through any
other, and the stream id doubles as the SSE ``id:`` for ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, cast

from core.redis import READ_BLOCK_SECONDS, blocking_timeout, connection_kwargs, keep_cancelled

END_EVENT = "__end__"
# Last-Event-ID value meaning "from the start" (sent by the JS useStream).
FROM_START = "-1"


def from_start(after: str | None) -> bool:
    """Whether a reader asked for a stream from its start (no Last-Event-ID, or ``-1``)."""
    return after in (None, FROM_START)


@dataclass(frozen=True)
class StreamEvent:
    """One event of a run's stream; ``gap`` means the replay window was exceeded."""

    id: str
    event: str
    data: Any


class ReplayGap(Exception):
    """The requested event fell out of the replay window."""

    def __init__(self, requested: str, earliest: str | None) -> None:
        super().__init__(requested)
        self.requested = requested
        self.earliest = earliest


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


class StreamBridge(ABC):
    """Publish run events; subscribe from an id (exclusive) until the terminal marker."""

    @abstractmethod
    async def publish(self, run_id: str, event: str, data: Any) -> str:
        """Append an event; return its id."""

    async def publish_many(self, run_id: str, events: list[tuple[str, Any]]) -> None:
        """Append ``(event, data)`` pairs in order: one round trip where the bridge can batch them."""
        for event, data in events:
            await self.publish(run_id, event, data)

    async def publish_end(self, run_id: str, outcome: dict[str, Any]) -> None:
        """Append the terminal marker carrying the run's outcome (status, error, values).

        Waiters (``/wait``, ``/join``, ``cancel?wait=1``) read the outcome from
        it, so a stateless run's result survives its thread's deletion.
        """
        await self.publish(run_id, END_EVENT, outcome)

    @abstractmethod
    def subscribe(
        self, run_id: str, *, after: str | None, idle_timeout: float
    ) -> AsyncGenerator[StreamEvent | None, None]:
        """Yield events after ``after`` (None or "-1": from the start), ``None`` when idle.

        The terminal marker (event ``__end__``) is yielded last. Raises
        ReplayGap when ``after`` is older than the retained window.
        """

    @abstractmethod
    async def last_id(self, run_id: str) -> str | None:
        """Return the id of the newest retained event (None: none yet), to tail from there."""

    async def aclose(self) -> None:  # noqa: B027 (a no-op unless the bridge holds connections)
        """Release connections."""


@dataclass
class _MemoryStream:
    events: deque = field(default_factory=deque)
    next_seq: int = 1
    ended_at: float | None = None
    touched_at: float = field(default_factory=time.monotonic)
    subscribers: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def forgettable(self, horizon: float) -> bool:
        """Ended before ``horizon``, or never ended (a thread's stream), silent since it and unwatched."""
        if self.ended_at is not None:
            return self.ended_at < horizon
        return self.touched_at < horizon and self.subscribers == 0


class MemoryStreamBridge(StreamBridge):
    """One process's bridge: per-run deques, ids are the per-run sequence number."""

    # Finished streams stay replayable this long for late joiners; a stream that
    # never ends (a thread's log tail) is forgotten after as long a silence with
    # nobody following it (followers of a thread's log read what came before from the database).
    RETAIN_ENDED_SECONDS = 600
    # A sweep walks every retained stream: at 35 runs a second that is some
    # 20,000 of them, so new streams sweep at most this often, not each one.
    SWEEP_SECONDS = 1.0

    def __init__(self, *, max_events: int) -> None:
        self.max_events = max_events
        self._streams: dict[str, _MemoryStream] = {}
        self._swept_at = float("-inf")

    def _stream(self, run_id: str) -> _MemoryStream:
        if (stream := self._streams.get(run_id)) is None:
            self._evict_ended()
            stream = self._streams[run_id] = _MemoryStream()
        return stream

    def _evict_ended(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < self.SWEEP_SECONDS:
            return
        self._swept_at = now
        horizon = now - self.RETAIN_ENDED_SECONDS
        for run_id in [r for r, s in self._streams.items() if s.forgettable(horizon)]:
            del self._streams[run_id]

    async def publish(self, run_id: str, event: str, data: Any) -> str:
        stream = self._stream(run_id)
        seq = self._append(stream, event, data)
        self._wake(stream)
        return str(seq)

    async def publish_many(self, run_id: str, events: list[tuple[str, Any]]) -> None:
        stream = self._stream(run_id)
        for event, data in events:
            self._append(stream, event, data)
        self._wake(stream)  # once for the batch: each subscriber reads it in one pass

    def _append(self, stream: _MemoryStream, event: str, data: Any) -> int:
        seq = stream.next_seq
        stream.next_seq += 1
        stream.events.append(StreamEvent(str(seq), event, data))
        stream.touched_at = time.monotonic()
        if len(stream.events) > self.max_events:
            stream.events.popleft()
        if event == END_EVENT:
            stream.ended_at = time.monotonic()
        return seq

    @staticmethod
    def _wake(stream: _MemoryStream) -> None:
        # Wake every waiter, then arm a fresh event for the next wait.
        stream.changed.set()
        stream.changed = asyncio.Event()

    async def last_id(self, run_id: str) -> str | None:
        stream = self._streams.get(run_id)
        return str(stream.next_seq - 1) if stream is not None and stream.next_seq > 1 else None

    async def subscribe(self, run_id: str, *, after: str | None, idle_timeout: float):
        stream = self._stream(run_id)
        position = 0 if after is None or from_start(after) else _parse_seq(after)
        earliest = int(stream.events[0].id) if stream.events else stream.next_seq
        if after is not None and position and position < earliest - 1:
            raise ReplayGap(after, str(earliest))
        stream.subscribers += 1
        try:
            while True:
                # Ids are consecutive, so what is new is the deque's right end: read only that
                # (scanning the whole retained window cost every subscriber every wake-up).
                count = min(stream.next_seq - 1 - position, len(stream.events))
                size = len(stream.events)
                pending = [stream.events[i] for i in range(size - count, size)] if count > 0 else []
                for event in pending:
                    position = int(event.id)
                    yield event
                    if event.event == END_EVENT:
                        return
                if pending:
                    continue
                waiter = stream.changed
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel (gh-86296).
                    async with asyncio.timeout(idle_timeout):
                        await waiter.wait()
                except TimeoutError:
                    yield None
        finally:
            stream.subscribers -= 1


def _parse_seq(event_id: str) -> int:
    try:
        return int(event_id.split("-")[0])
    except ValueError:
        raise ValueError(f"Invalid Last-Event-ID {event_id!r}") from None


# A stream's entries as XRANGE/XREAD return them: decode_responses is off, so
# ids, field names and values are bytes (redis-py types every reply bytes | str).
_Entries = list[tuple[bytes, dict[bytes, bytes]]]


class RedisStreamBridge(StreamBridge):
    """Redis Streams: XADD ... MAXLEN ~ per event, XREAD BLOCK to tail, EXPIRE to forget."""

    def __init__(self, url: str, *, max_events: int, ttl_seconds: int, prefix: str = "deerflow:run") -> None:
        import redis.asyncio as redis

        # Two pools: publishes keep the short command timeout. Tails block up
        # to READ_BLOCK_SECONDS (a shared 5 s timeout cut every XREAD BLOCK of
        # 5 s or more), bounded by an asyncio.timeout of that plus a margin
        # rather than a socket timeout: redis-py sends under wait_for on a
        # socket with a timeout, and on Python 3.11 a cancel landing as the
        # send completes is lost (``keep_cancelled``); the read then blocked
        # on, and the follower of a client that had left read on forever.
        self.client = redis.from_url(url, **connection_kwargs("bridge"))
        self.reader = redis.from_url(url, **connection_kwargs("bridge-tail", socket_timeout=None))
        self.block_seconds = READ_BLOCK_SECONDS
        self.max_events = max_events
        self.ttl_seconds = ttl_seconds
        self.prefix = prefix

    def key(self, run_id: str) -> str:
        return f"{self.prefix}:{run_id}"

    async def publish(self, run_id: str, event: str, data: Any) -> str:
        key = self.key(run_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xadd(key, {"event": event, "data": dumps(data)}, maxlen=self.max_events, approximate=True)
            pipe.expire(key, self.ttl_seconds)
            event_id, _ = await keep_cancelled(pipe.execute())
        return cast(bytes, event_id).decode()  # decode_responses is off: replies are bytes

    async def publish_many(self, run_id: str, events: list[tuple[str, Any]]) -> None:
        if not events:
            return
        key = self.key(run_id)
        async with self.client.pipeline(transaction=False) as pipe:
            for event, data in events:
                pipe.xadd(key, {"event": event, "data": dumps(data)}, maxlen=self.max_events, approximate=True)
            pipe.expire(key, self.ttl_seconds)
            await keep_cancelled(pipe.execute())

    async def last_id(self, run_id: str) -> str | None:
        newest = cast(_Entries, await keep_cancelled(self.client.xrevrange(self.key(run_id), count=1)))
        return newest[0][0].decode() if newest else None

    async def subscribe(self, run_id: str, *, after: str | None, idle_timeout: float):
        key = self.key(run_id)
        last = "0-0" if after is None or from_start(after) else _validate_stream_id(after)
        if after is not None and last != "0-0":
            first = cast(_Entries, await keep_cancelled(self.client.xrange(key, count=1)))
            # Older than the oldest retained entry: something between was trimmed.
            if first and _stream_id_key(last) < _stream_id_key(first[0][0].decode()):
                raise ReplayGap(after, first[0][0].decode())
        idle_since = time.monotonic()
        while True:
            # Block at most block_seconds at a time; report idleness once
            # idle_timeout passed. A Redis that does not answer in the block
            # time plus a margin raises TimeoutError.
            idle_left = idle_timeout - (time.monotonic() - idle_since)
            block_ms = max(1, int(min(idle_left, self.block_seconds) * 1000))
            async with asyncio.timeout(blocking_timeout(block_ms / 1000)):
                response = cast(
                    list[tuple[bytes, _Entries]], await self.reader.xread({key: last}, block=block_ms, count=100)
                )
            if not response:
                if time.monotonic() - idle_since >= idle_timeout - 0.001:
                    idle_since = time.monotonic()
                    yield None
                continue
            idle_since = time.monotonic()
            for _key, entries in response:
                for raw_id, fields in entries:
                    last = raw_id.decode()
                    event = StreamEvent(last, fields[b"event"].decode(), json.loads(fields[b"data"]))
                    yield event
                    if event.event == END_EVENT:
                        return

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.reader.aclose()


def _stream_id_key(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def _validate_stream_id(event_id: str) -> str:
    try:
        _stream_id_key(event_id)
    except ValueError:
        raise ValueError(f"Invalid Last-Event-ID {event_id!r}") from None
    return event_id
