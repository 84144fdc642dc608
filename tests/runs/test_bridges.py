"""The stream bridge contract, on the memory and the Redis bridge alike.

Order and ids as published, ``subscribe(after=id)`` replays exactly what
followed (what ``Last-Event-ID`` relies on), the end marker ends every
subscriber, a trimmed id is a ReplayGap, and idleness is reported as None.
The oracle is the list of events the test published.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from core.bridge import END_EVENT, FROM_START, MemoryStreamBridge, RedisStreamBridge, ReplayGap, _MemoryStream

pytestmark = pytest.mark.backend_free  # no Django database: the SQLite pass runs it once

PUBLISHED = [("metadata", {"run_id": "r"}), ("values", {"n": 1}), ("messages|a", ["tok"]), ("custom", {"n": 3})]


def _make(kind: str, request, max_events: int):
    if kind == "memory":
        return MemoryStreamBridge(max_events=max_events)
    url = request.getfixturevalue("redis_url")  # skips, saying why, without REDIS_URL
    return RedisStreamBridge(url, max_events=max_events, ttl_seconds=60, prefix=f"test-bridges:{uuid.uuid4().hex}")


@pytest.fixture(params=["memory", "redis"])
async def bridges(request):
    """Build bridges of the parametrized kind; close them in the test's loop."""
    made = []

    def make(max_events: int = 1000):
        made.append(_make(request.param, request, max_events))
        return made[-1]

    yield make
    for bridge in made:
        await bridge.aclose()


def _order(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


async def _publish_all(bridge, run_id: str, events=PUBLISHED, end: dict | None = None) -> list[str]:
    ids = [await bridge.publish(run_id, event, data) for event, data in events]
    if end is not None:
        await bridge.publish_end(run_id, end)
    return ids


async def _collect(bridge, run_id: str, after: str | None, within: float = 5) -> list:
    async def drain():
        return [e async for e in bridge.subscribe(run_id, after=after, idle_timeout=0.05) if e is not None]

    return await asyncio.wait_for(drain(), within)


async def test_events_come_back_in_publish_order_with_increasing_ids(bridges):
    bridge, run_id = bridges(), uuid.uuid4().hex
    ids = await _publish_all(bridge, run_id, end={"status": "success"})

    got = await _collect(bridge, run_id, after=None)

    assert [(e.event, e.data) for e in got] == [*PUBLISHED, (END_EVENT, {"status": "success"})]
    assert [e.id for e in got[:-1]] == ids
    assert [_order(e.id) for e in got] == sorted({_order(e.id) for e in got}), "ids must strictly increase"


async def test_subscribing_after_an_id_replays_exactly_what_followed_it(bridges):
    bridge, run_id = bridges(), uuid.uuid4().hex
    ids = await _publish_all(bridge, run_id, end={"status": "success"})
    everything = await _collect(bridge, run_id, after=None)

    for index, event_id in enumerate(ids):
        resumed = await _collect(bridge, run_id, after=event_id)
        assert resumed == everything[index + 1 :], f"after {event_id}"
    assert await _collect(bridge, run_id, after=FROM_START) == everything


async def test_the_end_marker_ends_every_live_subscriber(bridges):
    bridge, run_id = bridges(), uuid.uuid4().hex
    await bridge.publish(run_id, "metadata", {"run_id": run_id})
    tails = [asyncio.ensure_future(_collect(bridge, run_id, after=None)) for _ in range(3)]
    await asyncio.sleep(0)  # let them start tailing before the rest arrives
    await _publish_all(bridge, run_id, events=PUBLISHED[1:], end={"status": "interrupted"})

    results = await asyncio.gather(*tails)

    for got in results:
        assert [e.event for e in got] == [e for e, _ in PUBLISHED] + [END_EVENT]
        assert got[-1].data == {"status": "interrupted"}


async def test_a_late_subscriber_of_a_finished_stream_gets_everything_then_stops(bridges):
    bridge, run_id = bridges(), uuid.uuid4().hex
    await _publish_all(bridge, run_id, end={"status": "success"})
    started = time.monotonic()
    got = await _collect(bridge, run_id, after=None)
    assert got[-1].event == END_EVENT and len(got) == len(PUBLISHED) + 1
    assert time.monotonic() - started < 1, "a finished stream must not wait for more"


async def test_idle_subscribers_get_none_then_the_next_event(bridges):
    bridge, run_id = bridges(), uuid.uuid4().hex
    await bridge.publish(run_id, "metadata", {})
    stream = bridge.subscribe(run_id, after=None, idle_timeout=0.1)
    assert (await anext(stream)).event == "metadata"
    started = time.monotonic()
    assert await asyncio.wait_for(anext(stream), 5) is None
    assert 0.08 <= time.monotonic() - started < 2
    assert await asyncio.wait_for(anext(stream), 5) is None  # still idle: reported again
    await bridge.publish(run_id, "values", {"late": True})
    late = await asyncio.wait_for(anext(stream), 5)
    assert (late.event, late.data) == ("values", {"late": True})
    await stream.aclose()


async def test_an_unreadable_last_event_id_is_a_value_error(bridges):
    bridge = bridges()
    with pytest.raises(ValueError, match="Invalid Last-Event-ID"):
        await anext(bridge.subscribe(uuid.uuid4().hex, after="not-an-id", idle_timeout=0.1))


async def test_an_id_trimmed_from_the_window_is_a_replay_gap(bridges):
    # Redis trims approximately (whole 100-entry nodes): publish well past a node.
    bridge, run_id = bridges(max_events=5), uuid.uuid4().hex
    ids = await _publish_all(bridge, run_id, events=[("values", {"n": n}) for n in range(250)])

    with pytest.raises(ReplayGap) as gap:
        await anext(bridge.subscribe(run_id, after=ids[0], idle_timeout=0.1))

    assert gap.value.requested == ids[0]
    assert gap.value.earliest in ids and _order(gap.value.earliest) > _order(ids[1])
    # Right after the earliest retained id is no gap: the window serves it.
    resumed = bridge.subscribe(run_id, after=gap.value.earliest, idle_timeout=0.1)
    assert (await anext(resumed)).id == ids[ids.index(gap.value.earliest) + 1]
    await resumed.aclose()


async def test_the_memory_window_serves_the_id_just_before_its_earliest():
    bridge, run_id = MemoryStreamBridge(max_events=3), uuid.uuid4().hex
    ids = await _publish_all(bridge, run_id, events=[("values", {"n": n}) for n in range(6)])
    # Retained: ids[3:]; after ids[2] nothing is missing, after ids[1] ids[2] is.
    assert [e.id for e in await _collect_some(bridge, run_id, ids[2], 3)] == ids[3:]
    with pytest.raises(ReplayGap):
        await anext(bridge.subscribe(run_id, after=ids[1], idle_timeout=0.1))


async def _collect_some(bridge, run_id: str, after: str, count: int) -> list:
    stream = bridge.subscribe(run_id, after=after, idle_timeout=0.1)
    try:
        return [await asyncio.wait_for(anext(stream), 5) for _ in range(count)]
    finally:
        await stream.aclose()


async def test_the_memory_bridge_forgets_a_silent_stream_nobody_follows_but_keeps_a_followed_one(monkeypatch):
    bridge = MemoryStreamBridge(max_events=10)
    await bridge.publish("thread:silent", "values", {"n": 1})  # a thread's tail: never ends
    await bridge.publish("thread:watched", "values", {"n": 1})
    follower = bridge.subscribe("thread:watched", after=FROM_START, idle_timeout=0.01)
    assert (await anext(follower)).data == {"n": 1}
    monkeypatch.setattr(MemoryStreamBridge, "RETAIN_ENDED_SECONDS", 0)
    monkeypatch.setattr(MemoryStreamBridge, "SWEEP_SECONDS", 0)
    await bridge.publish("run:new", "values", {})  # a new stream sweeps the forgettable ones
    assert await bridge.last_id("thread:silent") is None
    assert await bridge.last_id("thread:watched") == "1"
    await follower.aclose()
    await bridge.publish("run:newer", "values", {})
    assert await bridge.last_id("thread:watched") is None


async def test_new_streams_sweep_the_retained_ones_at_most_once_a_sweep_interval(monkeypatch):
    monkeypatch.setattr(MemoryStreamBridge, "SWEEP_SECONDS", 3600)
    bridge = MemoryStreamBridge(max_events=10)
    for n in range(200):
        await bridge.publish(f"run:{n}", END_EVENT, {})
    looked_at = []
    forgettable = _MemoryStream.forgettable
    monkeypatch.setattr(
        _MemoryStream, "forgettable", lambda self, horizon: looked_at.append(self) or forgettable(self, horizon)
    )
    monkeypatch.setattr(MemoryStreamBridge, "RETAIN_ENDED_SECONDS", 0)
    for n in range(100):
        await bridge.publish(f"late:{n}", "values", {})
    assert looked_at == []  # within the interval of the first stream's sweep: no walk
    monkeypatch.setattr(MemoryStreamBridge, "SWEEP_SECONDS", 0)
    await bridge.publish("later", "values", {})
    assert len(looked_at) == 300  # one walk; the ended runs go, the silent unwatched ones too
    assert await bridge.last_id("run:0") is None and await bridge.last_id("later") == "1"


async def test_a_follower_cancelled_at_any_point_of_its_wait_ends_cancelled(bridges):
    """A cancel that lands as the follower's read is sent, or while it blocks, ends the follower at once.

    On Python 3.11 redis-py returned the blocking XREAD's (empty) answer to a
    task cancelled as the command went out, and the follower read on: an SSE
    stream whose client had left followed its run forever. Cancelled after
    each number of event-loop turns, every follower must end cancelled, long
    before its idle time (30 s) would have answered.
    """
    bridge, run_id = bridges(), uuid.uuid4().hex
    await bridge.publish(run_id, "metadata", {})

    async def follow():
        async for _event in bridge.subscribe(run_id, after=None, idle_timeout=30):
            pass

    outcomes = []
    for turns in range(12):
        follower = asyncio.ensure_future(follow())
        for _ in range(turns):
            await asyncio.sleep(0)
        follower.cancel()
        try:
            async with asyncio.timeout(5):
                await follower
            outcomes.append((turns, "returned"))
        except asyncio.CancelledError:
            outcomes.append((turns, "cancelled"))
    assert outcomes == [(turns, "cancelled") for turns in range(12)]


async def test_a_batch_publishes_in_order_between_single_events_and_wakes_live_subscribers(bridges):
    """``publish_many`` (the thread log's per-flush publish): the same events, ids and order as one by one."""
    bridge, run_id = bridges(), uuid.uuid4().hex
    await bridge.publish(run_id, "metadata", {"run_id": run_id})
    tail = asyncio.ensure_future(_collect(bridge, run_id, after=None))
    await asyncio.sleep(0)
    batch = [(f"messages|{i}", {"i": i}) for i in range(30)]
    await bridge.publish_many(run_id, batch[:15])
    await bridge.publish(run_id, "values", {"n": 1})
    await bridge.publish_many(run_id, batch[15:])
    await bridge.publish_many(run_id, [])
    await bridge.publish_end(run_id, {"status": "success"})
    got = await tail
    expected = [("metadata", {"run_id": run_id}), *batch[:15], ("values", {"n": 1}), *batch[15:]]
    assert [(e.event, e.data) for e in got[:-1]] == expected
    assert [_order(e.id) for e in got] == sorted({_order(e.id) for e in got})
    # A late subscriber gets what the window still holds, and exactly what followed a given id.
    kept = await _collect(bridge, run_id, after=got[-10].id)
    assert kept == got[-9:]


async def test_a_memory_subscriber_reads_only_the_new_tail_of_a_full_window():
    """Each wake reads what is new, not the whole retained window (10,000 events by default)."""
    bridge, run_id = MemoryStreamBridge(max_events=10_000), uuid.uuid4().hex
    await bridge.publish_many(run_id, [("e", i) for i in range(10_000)])
    stream = bridge._streams[run_id]
    last = stream.events[-1].id
    reads = []

    class Counting(type(stream.events)):
        def __getitem__(self, index):
            reads.append(index)
            return super().__getitem__(index)

    stream.events = Counting(stream.events, maxlen=stream.events.maxlen)
    tail = asyncio.ensure_future(_collect(bridge, run_id, after=last))
    await asyncio.sleep(0)
    await bridge.publish_many(run_id, [("e", "new"), ("e", "newer")])
    await bridge.publish_end(run_id, {"status": "success"})
    got = await tail
    assert [e.data for e in got] == ["new", "newer", {"status": "success"}]
    assert len(reads) <= 6  # the new events' indexes, not 10,000 of them
