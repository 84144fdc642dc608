"""A worker's stop is bounded whatever its channel layer does with a cancel.

channels-redis reads a channel in a loop (``while content is None``) and,
when redis-py dropped the cancel that should end it (Python 3.11
``wait_for``, CPython gh-86296), reads on: the layer here drops every cancel
the same way, for real, until the test lets it go. The live twin, SIGTERM
under load against Redis, is ``tests/live/test_worker_shutdown.py``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.layers import InMemoryChannelLayer

from core.bridge import MemoryStreamBridge
from runs.execution import cancel_listener
from runs.execution.cancel_listener import CLAIMERS_GROUP, CancelListener
from runs.execution.worker import LOOPS_STOP_SECONDS, RunWorker

pytestmark = pytest.mark.django_db(transaction=True)


class CancelDroppingLayer(InMemoryChannelLayer):
    """An in-memory layer whose ``receive`` reads on after a cancel while ``deaf``, as channels-redis did."""

    def __init__(self) -> None:
        super().__init__()
        self.deaf = True
        self.dropped = 0
        self.reading = asyncio.Event()

    async def receive(self, channel):
        self.reading.set()
        while True:
            try:
                return await super().receive(channel)
            except asyncio.CancelledError:
                if not self.deaf:
                    raise
                self.dropped += 1
                asyncio.current_task().uncancel()


@pytest.fixture
def layer(monkeypatch):
    layer = CancelDroppingLayer()
    monkeypatch.setattr(cancel_listener, "get_channel_layer", lambda: layer)
    return layer


async def test_a_listener_read_that_drops_its_cancel_does_not_hold_the_stop(layer, caplog):
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=10), claim=False, poll_seconds=30)
    await worker.start()
    async with asyncio.timeout(5):
        await layer.reading.wait()  # the listener has subscribed and reads
    started = time.monotonic()
    stopping = asyncio.create_task(worker.aclose())
    done, _ = await asyncio.wait({stopping}, timeout=LOOPS_STOP_SECONDS + 3)
    try:
        assert done, "the stop waited on the channel layer's read"
        assert time.monotonic() - started < LOOPS_STOP_SECONDS + 1
        assert layer.dropped >= 2  # the stop cancelled the read again and again, then gave up on it
        assert "runs-cancel-receive did not end when cancelled; abandoned" in caplog.text
    finally:
        layer.deaf = False
        readers = [task for task in asyncio.all_tasks() if task.get_name().startswith("runs-cancel-")]
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, stopping, return_exceptions=True)


async def test_the_listener_still_relays_what_the_layer_delivers(layer):
    """The read in a task of its own hands each message to the listener, then reads again."""
    layer.deaf = False
    woken = asyncio.Event()
    listener = CancelListener(worker_id="w", on_cancel=lambda *_: None, on_wake=woken.set)
    listening = asyncio.create_task(listener.run())
    try:
        async with asyncio.timeout(5):
            await layer.reading.wait()
        for _ in range(2):
            woken.clear()
            await layer.group_send(CLAIMERS_GROUP, {"type": "runs.wake"})
            async with asyncio.timeout(5):
                await woken.wait()
    finally:
        listening.cancel()  # and with it the read it waits on
        await asyncio.gather(listening, return_exceptions=True)
        await asyncio.gather(*[read for read in [listener.read] if read], return_exceptions=True)
