"""Following a thread's protocol-v2 log: replay from the database, then the live tail.

The log lives in the database (``ThreadStreamEvent``); the process's stream
bridge (memory, or Redis for several processes) carries each committed batch
to live subscribers under the key ``thread:<id>``. A follower notes the
bridge's newest id, replays ``seq > since`` from the database, then tails the
bridge from that id, skipping what it already sent and filling any hole from
the database. While idle it re-reads the database, so an event whose live
publish was lost (its process died, Redis blinked) still arrives.

A follower follows one *life* of a thread id (``Incarnation``): clients
choose thread ids, so an id is deleted and created again, by its owner or by
someone else, and its log starts over at seq 1. A follower reads only its
life's rows and stops when that life ends; the deletion is announced on the
thread's key, so followers in every process stop at once.

Here too is the other half of the live tail: handing committed log events to
the bridge (``publish_thread_events``) and announcing a thread's deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from core.bridge import ReplayGap, StreamBridge, StreamEvent
from core.bridge_runtime import get_bridge
from core.errors import Unavailable
from threads.stream_log import thread_life, thread_stream_bounds, thread_stream_holds, thread_stream_since

logger = logging.getLogger(__name__)

_PAGE = 500
# Published on ``thread:<id>`` once a thread's deletion committed (``announce_thread_deleted``).
DELETED_EVENT = "__thread_deleted__"


def thread_key(thread_id: str) -> str:
    return f"thread:{thread_id}"


@dataclass(frozen=True)
class Incarnation:
    """One life of a thread id, from the creation of its ``ThreadMeta`` row to its deletion.

    The row's ``created_at`` tells lives apart (a delete and a create take
    milliseconds; the column keeps microseconds); the owner is part of it, so
    a follower never reads rows of a thread that is not its caller's.
    """

    thread_id: str
    owner_id: int
    created_at: datetime

    @classmethod
    def of(cls, thread) -> Incarnation:
        return cls(thread.thread_id, thread.owner_id, thread.created_at)

    @property
    def life(self) -> tuple[int, datetime]:
        return self.owner_id, self.created_at


class ResumeGap(Exception):
    """``since`` is older than the oldest event the log still keeps, or newer than its newest.

    A ``since`` past the newest seq came from another life of the thread id
    (deleted and created again: the new log starts over at 1); serving it
    would silently skip the new life's first events.
    """

    def __init__(self, since: int, min_available_seq: int, *, newest: int | None = None) -> None:
        if newest is None:
            message = f"resume gap: since={since} is older than min_available_seq={min_available_seq}"
        else:
            message = (
                f"resume gap: since={since} is newer than the thread's newest seq {newest}; "
                "the thread was deleted and created again since"
            )
        super().__init__(message)
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
    """Hand committed log events to live followers in every process, a batch in one bridge round trip.

    (One Redis round trip per event was the protocol-v2 path's largest cost
    under load: ``bench.agents``, docs/performance.md.)
    """
    await bridge.publish_many(thread_key(thread_id), [(event["method"], event) for event in envelopes])


def announce_thread_deleted(thread_id: str) -> None:
    """Tell the thread's followers in every process that it is gone; call after the delete committed.

    A follower that misses it (no bridge in this process, Redis away) finds
    out at its next idle re-read, ``stream_bridge.heartbeat_seconds`` later,
    or at the first event of a later life of the id, which it cannot vouch for.
    """
    try:
        bridge = get_bridge()
        async_to_sync(bridge.publish)(thread_key(thread_id), DELETED_EVENT, {"thread_id": thread_id})
    except Unavailable:
        return
    except Exception:
        logger.warning("thread %s: announcing its deletion to followers failed", thread_id, exc_info=True)


_since = database_sync_to_async(thread_stream_since)
_bounds = database_sync_to_async(thread_stream_bounds)
_holds = database_sync_to_async(thread_stream_holds)
_life = database_sync_to_async(thread_life)


async def owned_incarnation(thread_id: str, owner_id: int) -> Incarnation | None:
    """Return the life of ``thread_id`` that ``owner_id`` owns now, or None (missing, or someone else's)."""
    created_at = await _life(thread_id=thread_id, owner_id=owner_id)
    return None if created_at is None else Incarnation(thread_id, owner_id, created_at)


async def alive(incarnation: Incarnation) -> bool:
    """Whether this life of the thread still exists (one primary-key read)."""
    return await owned_incarnation(incarnation.thread_id, incarnation.owner_id) == incarnation


async def check_resume(incarnation: Incarnation, since: int | None) -> int:
    """Return the highest seq; raise ResumeGap when ``since`` predates what is kept or is past the newest."""
    low, high = await _bounds(thread_id=incarnation.thread_id, life=incarnation.life)
    if since is not None and low > 1 and since < low - 1:
        raise ResumeGap(since, low)
    if since is not None and since > high:
        raise ResumeGap(since, max(low, 1), newest=high)
    return high


async def replay(
    incarnation: Incarnation, since: int, until: int | None = None, *, methods: tuple[str, ...] | None = None
) -> AsyncIterator[dict]:
    """Yield this life's envelopes with ``since < seq < until``, read in pages of ``_PAGE``."""
    while True:
        rows = await _since(
            thread_id=incarnation.thread_id,
            since=since,
            until=until,
            limit=_PAGE,
            life=incarnation.life,
            methods=methods,
        )
        for row in rows:
            since = row["seq"]
            yield row
        if len(rows) < _PAGE:
            return


async def until_owned(
    bridge: StreamBridge, thread_id: str, owner_id: int, *, idle_timeout: float, recheck_seconds: float = 1.0
) -> AsyncIterator[Incarnation | None]:
    """Yield None every ``idle_timeout`` (a heartbeat) until the id is the owner's; then yield its Incarnation, last.

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
        if (incarnation := await owned_incarnation(thread_id, owner_id)) is not None:
            yield incarnation
            return
        with contextlib.suppress(ReplayGap):
            async with contextlib.aclosing(bridge.subscribe(key, after=position, idle_timeout=recheck_seconds)) as tail:
                async for _ in tail:
                    break
        if loop.time() - beat >= idle_timeout:
            beat = loop.time()
            yield None


async def wait_owned(bridge: StreamBridge, thread_id: str, owner_id: int) -> Incarnation:
    """Return the owner's life of the id once there is one (``until_owned`` without heartbeats)."""
    async for incarnation in until_owned(bridge, thread_id, owner_id, idle_timeout=float("inf")):
        if incarnation is not None:
            return incarnation
    raise AssertionError("until_owned ends with the incarnation")


async def _vouched(incarnation: Incarnation, event: StreamEvent, sources: set[str]) -> bool:
    """Whether a live event is this life's: its run was vouched for, or the database has the row.

    One indexed read per run (a run logs hundreds of events), not per event;
    a ``state:`` event stands alone and is read each time.
    """
    if event.event == DELETED_EVENT:
        return False
    event_id, seq = event.data["event_id"], event.data["seq"]
    source = None if event_id.startswith("state:") else event_id.removeprefix("synth:").split(":", 1)[0]
    if source in sources:
        return True
    if not await _holds(thread_id=incarnation.thread_id, life=incarnation.life, seq=seq, event_id=event_id):
        return False
    if source is not None:
        sources.add(source)
    return True


async def follow_thread(
    bridge: StreamBridge, incarnation: Incarnation, *, since: int | None, idle_timeout: float
) -> AsyncIterator[dict | None]:
    """Yield this life's envelopes with ``seq > since`` (all when None), None while idle; return once it ended.

    A live event goes out as published only when ``_vouched`` for. Anything
    else (an idle tick, an announced deletion, an event of another life of the
    id or a late publish of an earlier one) sends the follower to the
    database: it replays what this life logged since and asks whether the
    life still exists (one primary-key read), so a deletion ends the follow
    before the next life's first event could be delivered.
    """
    last = since or 0
    key = thread_key(incarnation.thread_id)
    sources: set[str] = set()
    while True:
        position = await bridge.last_id(key)
        async for row in replay(incarnation, last):
            last = row["seq"]
            yield row
        try:
            async for event in bridge.subscribe(key, after=position, idle_timeout=idle_timeout):
                if event is None or not await _vouched(incarnation, event, sources):
                    async for row in replay(incarnation, last):
                        last = row["seq"]
                        yield row
                    if not await alive(incarnation):
                        return
                    if event is None:
                        yield None
                    continue
                seq = event.data["seq"]
                if seq <= last:
                    continue
                if seq > last + 1:  # published out of order or trimmed: the database has them
                    async for row in replay(incarnation, last, until=seq):
                        last = row["seq"]
                        yield row
                last = seq
                yield event.data
        except ReplayGap:
            logger.info(
                "thread %s: live tail fell out of the bridge window; replaying from the log", incarnation.thread_id
            )


async def follow_owned(
    bridge: StreamBridge, thread_id: str, owner_id: int, *, since: int | None, idle_timeout: float
) -> AsyncIterator[dict | None]:
    """Follow the owner's thread across its lives; None while waiting or idle.

    Waits until the id is the owner's, follows that life, and when it is
    deleted waits again, as for an id that was never theirs. ``since``
    applies to the first life followed; a later one (the owner created the id
    again) is another log, sent from its first event.
    """
    while True:
        incarnation = None
        async for incarnation in until_owned(bridge, thread_id, owner_id, idle_timeout=idle_timeout):
            if incarnation is None:
                yield None
        assert incarnation is not None, "until_owned() returns only after yielding the owner's incarnation"
        await check_resume(incarnation, since)
        async for event in follow_thread(bridge, incarnation, since=since, idle_timeout=idle_timeout):
            yield event
        since = None
