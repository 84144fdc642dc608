"""``sse_stream`` and ``run_outcome`` over a real memory bridge (and real run rows where they read one).

The frames are parsed back and compared with what was published; a bridge
that fails is a real bridge subclass whose subscribe raises part-way.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.utils import timezone

from core.bridge import END_EVENT, MemoryStreamBridge
from runs.models import Run
from runs.streaming import sse
from runs.streaming.sse import HEARTBEAT, OPENING, run_outcome, sse_stream
from threads.models import ThreadMeta

# Only an idle stream reads the run row (from a worker thread, so those tests
# commit); the others need the run's id alone.
ROW_READ = pytest.mark.django_db(transaction=True)


class BrokenBridge(MemoryStreamBridge):
    """A memory bridge whose tail breaks after ``serve`` events, as Redis going away does."""

    def __init__(self, *, serve: int) -> None:
        super().__init__(max_events=100)
        self.serve = serve

    async def subscribe(self, run_id: str, *, after, idle_timeout: float):
        served = 0
        async for event in super().subscribe(run_id, after=after, idle_timeout=idle_timeout):
            if served == self.serve:
                raise ConnectionError("Connection refused")
            served += 1
            yield event


def _unsaved() -> Run:
    return Run(run_id=uuid.uuid4().hex)


def _run(owner, status: str = "running") -> Run:
    thread = ThreadMeta.objects.create(thread_id=f"sse-{uuid.uuid4().hex}", owner=owner.user)
    return Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status=status
    )


def _parse(chunk: bytes) -> dict[str, str]:
    """Return the fields of one SSE frame (or the comment of a comment frame)."""
    assert chunk.endswith(b"\r\n\r\n"), chunk
    fields = {}
    for line in chunk.decode().removesuffix("\r\n\r\n").split("\r\n"):
        name, _, value = line.partition(": ")
        fields[name] = value
    return fields


async def _frames(stream, within: float = 5) -> list[bytes]:
    async def drain():
        return [chunk async for chunk in stream]

    return await asyncio.wait_for(drain(), within)


async def test_frames_carry_event_data_and_id_and_stop_at_the_end():
    run, bridge = _unsaved(), MemoryStreamBridge(max_events=100)
    published = [("values", {"title": "é"}), ("messages|x", [{"c": "a"}, {}])]
    ids = [await bridge.publish(run.run_id, event, data) for event, data in published]
    await bridge.publish_end(run.run_id, {"status": "success"})

    chunks = await _frames(sse_stream(bridge, run, after=None, heartbeat=5))

    assert chunks[0] == OPENING
    metadata, *frames = (_parse(c) for c in chunks[1:])
    # The stream's own opening event, before anything the run published: it has no id to resume after.
    assert (metadata["event"], json.loads(metadata["data"])) == (
        "metadata",
        {"run_id": run.run_id, "thread_id": None, "attempt": 1},
    )
    assert "id" not in metadata
    assert [(f["event"], json.loads(f["data"]), f["id"]) for f in frames] == [
        (event, data, event_id) for (event, data), event_id in zip(published, ids, strict=True)
    ]
    assert END_EVENT not in b"".join(chunks).decode()


async def test_a_stream_resumed_after_an_id_sends_only_later_frames():
    run, bridge = _unsaved(), MemoryStreamBridge(max_events=100)
    ids = [await bridge.publish(run.run_id, "values", {"n": n}) for n in range(4)]
    await bridge.publish_end(run.run_id, {"status": "success"})

    chunks = await _frames(sse_stream(bridge, run, after=ids[1], heartbeat=5))

    assert [_parse(c)["id"] for c in chunks[1:]] == ids[2:]


async def test_modes_filter_frames_but_keep_metadata_and_errors():
    run, bridge = _unsaved(), MemoryStreamBridge(max_events=100)
    for event in ("updates", "values", "messages|tuple", "error"):
        await bridge.publish(run.run_id, event, {})
    await bridge.publish_end(run.run_id, {"status": "error"})

    chunks = await _frames(sse_stream(bridge, run, after=None, heartbeat=5, modes={"messages"}))

    assert [_parse(c)["event"] for c in chunks[1:]] == ["metadata", "messages|tuple", "error"]


@ROW_READ
async def test_an_idle_running_stream_sends_heartbeats_until_its_end(owner):
    run, bridge = await db(_run)(owner), MemoryStreamBridge(max_events=100)
    stream = sse_stream(bridge, run, after=None, heartbeat=0.05)
    assert await anext(stream) == OPENING
    assert _parse(await anext(stream))["event"] == "metadata"

    assert await asyncio.wait_for(anext(stream), 5) == HEARTBEAT
    assert await asyncio.wait_for(anext(stream), 5) == HEARTBEAT
    await bridge.publish(run.run_id, "values", {"late": 1})
    assert _parse(await asyncio.wait_for(anext(stream), 5))["event"] == "values"
    await bridge.publish_end(run.run_id, {"status": "success"})
    assert await _frames(stream) == []


@ROW_READ
async def test_an_idle_stream_of_a_finished_run_ends_without_its_marker(owner):
    """The marker never reached this bridge (it expired): the run row ends the stream."""
    run, bridge = await db(_run)(owner, status="success"), MemoryStreamBridge(max_events=100)
    opening, metadata = await _frames(sse_stream(bridge, run, after=None, heartbeat=0.05))
    assert opening == OPENING and _parse(metadata)["event"] == "metadata"
    # A run that streamed and ended an hour ago: its marker would have come long since.
    hour_ago = timezone.now() - timedelta(hours=1)
    await db(Run.objects.filter(pk=run.pk).update)(started_at=hour_ago, finished_at=hour_ago)
    started = time.monotonic()
    assert len(await _frames(sse_stream(bridge, run, after=None, heartbeat=0.05))) == 2
    assert time.monotonic() - started < sse.END_MARKER_GRACE_SECONDS


@ROW_READ
async def test_a_just_finished_runs_stream_waits_for_its_last_events_and_marker(owner):
    """Finalize commits the row, then publishes the run's last events and its marker: a reader that stopped
    at the row missed them (a WebSocket join under CI load ended without its "end" event)."""
    run, bridge = await db(_run)(owner, status="success"), MemoryStreamBridge(max_events=100)
    now = timezone.now()
    await db(Run.objects.filter(pk=run.pk).update)(started_at=now, finished_at=now)
    await bridge.publish(run.run_id, "values", {"n": 1})

    async def finalize_publishes_late():
        await asyncio.sleep(0.3)  # the gap between the row's commit and the publishes, drawn out
        await bridge.publish(run.run_id, "values", {"n": 2})
        await bridge.publish_end(run.run_id, {"status": "success"})

    late = asyncio.ensure_future(finalize_publishes_late())
    chunks = await _frames(sse_stream(bridge, run, after=None, heartbeat=5))
    await late
    assert [json.loads(_parse(c)["data"]) for c in chunks[2:]] == [{"n": 1}, {"n": 2}]


async def test_a_trimmed_last_event_id_answers_a_gap_frame():
    run, bridge = _unsaved(), MemoryStreamBridge(max_events=2)
    ids = [await bridge.publish(run.run_id, "values", {"n": n}) for n in range(5)]

    chunks = await _frames(sse_stream(bridge, run, after=ids[0], heartbeat=5))

    [gap] = [_parse(c) for c in chunks[1:]]
    assert gap["event"] == "gap" and "id" not in gap
    assert json.loads(gap["data"]) == {
        "code": "stream_replay_gap",
        "run_id": run.run_id,
        "requested_event_id": ids[0],
        "earliest_available_event_id": ids[3],
        "recovery": "reload_durable_state",
    }


async def test_a_failing_bridge_ends_the_stream_with_an_error_frame():
    run, bridge = _unsaved(), BrokenBridge(serve=1)
    first = await bridge.publish(run.run_id, "values", {})
    await bridge.publish(run.run_id, "values", {})

    chunks = await _frames(sse_stream(bridge, run, after=None, heartbeat=5))

    metadata, values, error = (_parse(c) for c in chunks[1:])
    assert metadata["event"] == "metadata" and (values["event"], values["id"]) == ("values", first)
    assert error["event"] == "error"
    data = json.loads(error["data"])
    assert data["name"] == data["error"] == "StreamInterrupted"
    assert "ConnectionError: Connection refused" in data["message"]


async def test_a_client_disconnect_applies_the_runs_policy():
    run, bridge = _unsaved(), MemoryStreamBridge(max_events=100)
    called, streaming = asyncio.Event(), asyncio.Event()

    async def on_disconnect():
        called.set()

    async def consume():
        async for chunk in sse_stream(bridge, run, after=None, heartbeat=5, on_disconnect=on_disconnect):
            if chunk != OPENING:
                streaming.set()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(streaming.wait(), 5)  # the opening metadata
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert called.is_set()


@ROW_READ
async def test_run_outcome_returns_the_end_markers_outcome(owner):
    run, bridge = await db(_run)(owner), MemoryStreamBridge(max_events=100)
    await bridge.publish(run.run_id, "values", {})
    waiter = asyncio.ensure_future(run_outcome(bridge, run, idle=0.05))
    await bridge.publish_end(run.run_id, {"status": "success", "values": {"n": 1}})
    assert await asyncio.wait_for(waiter, 5) == {"status": "success", "values": {"n": 1}}


@ROW_READ
async def test_run_outcome_waits_on_the_row_when_the_bridge_fails(owner):
    run, bridge = await db(_run)(owner), BrokenBridge(serve=0)
    await bridge.publish(run.run_id, "values", {})
    waiter = asyncio.ensure_future(run_outcome(bridge, run, idle=0.05))
    await asyncio.sleep(0.2)
    assert not waiter.done(), "the run is still running: the waiter must keep waiting"
    await db(Run.objects.filter(pk=run.pk).update)(status="success")
    assert await asyncio.wait_for(waiter, 5) is None
