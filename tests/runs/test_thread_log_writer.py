"""The run's thread-log writer: bursts written ``interval`` after their first event, nothing left behind a write."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from channels.db import database_sync_to_async as db
from django.db import OperationalError

from core.bridge import MemoryStreamBridge
from runs.execution import thread_log
from runs.execution.thread_log import ThreadLogWriter
from threads import stream_log
from threads.services import thread_create
from threads.stream_log import PendingEvent, thread_stream_append, thread_stream_since

pytestmark = pytest.mark.django_db(transaction=True)


def events(run_id: str, names: list[str]) -> list[PendingEvent]:
    return [PendingEvent(f"{run_id}:{n}", "custom", [], {"n": n}) for n in names]


async def logged(thread_id: str) -> list[str]:
    return [e["params"]["data"]["n"] for e in await db(thread_stream_since)(thread_id=thread_id, since=0)]


async def test_events_queued_during_a_write_follow_it_without_waiting_for_another_event(owner, monkeypatch):
    thread, _ = await db(thread_create)(owner=owner.user, thread_id=f"log-{uuid.uuid4().hex[:8]}", metadata={})
    writing, wrote_b1 = threading.Event(), threading.Event()
    real_append_all = thread_log._append_all

    def slow_append_all(appends):  # the real write and its commit, taking a while: a busy database
        writing.set()
        time.sleep(0.3)
        written = real_append_all(appends)  # committed when it returns (one batch's append is not)
        if any(event.data["n"] == "b1" for append in appends for event in append.events):
            wrote_b1.set()
        return written

    monkeypatch.setattr(thread_log, "_append_all", slow_append_all)
    run_id = uuid.uuid4().hex
    writer = ThreadLogWriter(
        thread_id=thread.thread_id, run_id=run_id, bridge=MemoryStreamBridge(max_events=100), interval=0.05
    )
    writer.add(events(run_id, ["a1", "a2"]))
    await asyncio.to_thread(writing.wait, 5)  # the first burst's write is under way
    writer.add(events(run_id, ["b1"]))  # ... and this arrives during it; nothing comes after
    assert await asyncio.to_thread(wrote_b1.wait, 5), "b1 waited for an event that never came"
    assert await logged(thread.thread_id) == ["a1", "a2", "b1"]
    assert await writer.drain() == []


class TimedBridge(MemoryStreamBridge):
    """The memory bridge, noting when each batch was published."""

    def __init__(self) -> None:
        super().__init__(max_events=100)
        self.published: list[float] = []

    async def publish_many(self, run_id, events):
        await super().publish_many(run_id, events)
        self.published.append(time.monotonic())


async def test_a_run_ending_on_an_interrupt_publishes_its_last_events_a_gap_before_the_interrupt(owner):
    """The SDK ends the caller's message iterators when its second stream sees input.requested: events
    published with it were lost to them (the SDK integration suite's test_messages, about one run in two)."""
    thread, _ = await db(thread_create)(owner=owner.user, thread_id=f"log-{uuid.uuid4().hex[:8]}", metadata={})
    run_id = uuid.uuid4().hex
    bridge = TimedBridge()
    writer = ThreadLogWriter(thread_id=thread.thread_id, run_id=run_id, bridge=bridge, interval=0.5)
    writer.add(events(run_id, ["m1", "m2"]))
    assert await writer.drain(publish_first=True) == []  # nothing left for finalize but its outcome
    assert await logged(thread.thread_id) == ["m1", "m2"] and len(bridge.published) == 1
    await writer.pause_gap()  # the executor publishes finalize's events (the input.requested) after this
    assert time.monotonic() - bridge.published[0] >= thread_log.PAUSE_GAP
    # Without an interrupt nothing waits: the tail goes to finalize with the outcome, as before.
    other = ThreadLogWriter(thread_id=thread.thread_id, run_id=run_id, bridge=bridge, interval=0.5)
    other.add(events(run_id, ["m3"]))
    assert [e.data["n"] for e in await other.drain()] == ["m3"]
    started = time.monotonic()
    await other.pause_gap()
    assert time.monotonic() - started < thread_log.PAUSE_GAP / 2


def commits_then_fails(monkeypatch, times: int = 1) -> None:
    """The writer's next ``times`` writes commit, then the connection is lost before the caller hears so."""
    real_append = thread_log.thread_stream_append
    failures = iter([True] * times)

    def append(**kwargs):
        written = real_append(**kwargs)
        if next(failures, False):
            raise OperationalError("consuming input failed: server closed the connection unexpectedly")
        return written

    monkeypatch.setattr(thread_log, "thread_stream_append", append)


class RecordingBridge(MemoryStreamBridge):
    """The memory bridge, keeping each published batch of envelopes."""

    def __init__(self) -> None:
        super().__init__(max_events=100)
        self.batches: list[list[dict]] = []

    async def publish_many(self, run_id, events):
        await super().publish_many(run_id, events)
        self.batches.append([envelope for _method, envelope in events])


async def test_a_write_whose_commit_was_lost_is_not_logged_twice_by_the_next(owner, monkeypatch):
    """The fault soak found a run with two ``running`` events: its first write committed, the caller saw
    the connection fail, and the retry wrote it again."""
    thread, _ = await db(thread_create)(owner=owner.user, thread_id=f"log-{uuid.uuid4().hex[:8]}", metadata={})
    commits_then_fails(monkeypatch)
    run_id = uuid.uuid4().hex
    bridge = RecordingBridge()
    writer = ThreadLogWriter(thread_id=thread.thread_id, run_id=run_id, bridge=bridge, interval=0.01)
    writer.add(events(run_id, ["running", "m1"]))
    assert not await writer.flush() and writer.in_doubt  # committed, but the caller saw it fail
    writer.add(events(run_id, ["m2"]))
    assert await writer.flush() and not writer.in_doubt
    assert await logged(thread.thread_id) == ["running", "m1", "m2"]
    [published] = bridge.batches  # followers got all three, once, in the log's order
    assert [e["params"]["data"]["n"] for e in published] == ["running", "m1", "m2"]
    assert [e["seq"] for e in published] == sorted(e["seq"] for e in published)


async def test_a_batch_in_doubt_at_the_runs_end_is_logged_once_by_finalize(owner, monkeypatch):
    thread, _ = await db(thread_create)(owner=owner.user, thread_id=f"log-{uuid.uuid4().hex[:8]}", metadata={})
    commits_then_fails(monkeypatch)
    run_id = uuid.uuid4().hex
    writer = ThreadLogWriter(thread_id=thread.thread_id, run_id=run_id, bridge=TimedBridge(), interval=0.01)
    writer.add(events(run_id, ["running", "m1"]))
    assert not await writer.flush()
    writer.add(events(run_id, ["m2"]))
    tail = await writer.drain()  # what run_finalize gets, with stream_retry=writer.in_doubt
    assert [e.data["n"] for e in tail] == ["running", "m1", "m2"] and writer.in_doubt
    envelopes = await db(thread_stream_append)(
        thread_id=thread.thread_id, run_id=run_id, events=[*tail, *events(run_id, ["completed"])], retry=True
    )
    assert [e["params"]["data"]["n"] for e in envelopes] == ["running", "m1", "m2", "completed"]
    assert await logged(thread.thread_id) == ["running", "m1", "m2", "completed"]
    # Without the retry flag the same call would have logged the committed pair again.
    again = await db(thread_stream_append)(thread_id=thread.thread_id, run_id=run_id, events=tail[:1])
    assert len(again) == 1 and (await logged(thread.thread_id)).count("running") == 2


async def writers_of_new_threads(owner, count: int) -> list[ThreadLogWriter]:
    """A writer each for ``count`` new threads, all on one bridge."""
    bridge = MemoryStreamBridge(max_events=100)
    writers = []
    for _ in range(count):
        thread, _ = await db(thread_create)(owner=owner.user, thread_id=f"log-{uuid.uuid4().hex[:8]}", metadata={})
        writers.append(ThreadLogWriter(thread_id=thread.thread_id, run_id=uuid.uuid4().hex, bridge=bridge, interval=1))
    return writers


def recorded_groups(monkeypatch) -> list[list[str]]:
    """The thread ids of each group transaction from now on; one group on both backends."""
    real_all = thread_log._append_all
    groups: list[list[str]] = []

    def append_all(appends):
        groups.append(sorted(append.thread_id for append in appends))
        return real_all(appends)

    monkeypatch.setattr(thread_log, "_append_all", append_all)
    monkeypatch.setattr(thread_log, "POSTGRES_LANES", 1)
    return groups


async def test_batches_due_during_a_write_go_together_in_the_next_transaction(owner, monkeypatch):
    """Group commit: three runs' batches arriving during another write are one transaction, not three."""
    writers = await writers_of_new_threads(owner, 4)
    writing = threading.Event()
    real_append = thread_log.thread_stream_append

    def slow_append(**kwargs):  # the first write takes a while: a busy database
        if not writing.is_set():
            writing.set()
            time.sleep(0.3)
        return real_append(**kwargs)

    monkeypatch.setattr(thread_log, "thread_stream_append", slow_append)
    groups = recorded_groups(monkeypatch)
    for writer in writers:
        writer.add(events(writer.run_id, ["x"]))
    first = asyncio.ensure_future(writers[0].flush())
    await asyncio.to_thread(writing.wait, 5)  # the first batch's write is under way
    assert all(await asyncio.gather(first, *(writer.flush() for writer in writers[1:])))
    assert groups == [[writers[0].thread_id], sorted(w.thread_id for w in writers[1:])]
    for writer in writers:
        assert await logged(writer.thread_id) == ["x"]


async def test_a_batch_that_fails_in_a_group_fails_alone(owner, monkeypatch):
    """A batch its write refuses (here a value that cannot be stored) rolls back to its savepoint; the rest commit."""
    writers = await writers_of_new_threads(owner, 3)
    real_storable = stream_log.storable_json

    def storable(data):
        if data == {"n": "unstorable"}:
            raise ValueError("this value cannot be stored")
        return real_storable(data)

    monkeypatch.setattr(stream_log, "storable_json", storable)
    groups = recorded_groups(monkeypatch)
    for writer, name in zip(writers, ["x", "unstorable", "y"], strict=True):
        writer.add(events(writer.run_id, ["first", name]))
    assert await asyncio.gather(*(writer.flush() for writer in writers)) == [True, False, True]
    assert len(groups) == 1  # the three batches came due together: one transaction
    assert [await logged(w.thread_id) for w in writers] == [["first", "x"], [], ["first", "y"]]
    assert writers[1].in_doubt and [e.data["n"] for e in await writers[1].drain()] == ["first", "unstorable"]
