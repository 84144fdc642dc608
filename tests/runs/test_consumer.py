"""The run WebSocket through the real ASGI app, in-process, with Channels' WebsocketCommunicator.

The app starts this process's runtime (savers, bridge, worker) before its
first connection, as under a server that sends no lifespan events; each test shuts it down again.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from channels.db import database_sync_to_async as db
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from core.bridge_runtime import get_bridge
from core.errors import Unavailable
from deerflow_site import lifecycle
from deerflow_site.asgi import application
from runs.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from runs.execution.runtime import get_worker
from runs.models import Run
from runs.services.admission import run_admit
from tests.console import VIEW_ALL, staff
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 10


@pytest.fixture
async def no_runtime_yet():
    """Nothing started: the app must build the runtime itself; shut down after the test."""
    await lifecycle.shutdown()
    try:
        yield
    finally:
        await lifecycle.shutdown()


def _run(owner, *, text: str = "hi", status: str = "success") -> Run:
    thread = ThreadMeta.objects.create(thread_id=f"ws-{uuid.uuid4().hex}", owner=owner.user)
    kwargs = {"input": {"messages": [{"role": "user", "content": text}]}, "stream_mode": ["messages-tuple"]}
    run, _ = run_admit(
        owner=owner.user, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs=kwargs
    )
    if status != "pending":
        Run.objects.filter(pk=run.pk).update(status=status)
    return run


def _socket(run: Run, key: str | None, query: str = "", cookie: str | None = None) -> WebsocketCommunicator:
    path = f"/ws/threads/{run.thread_id}/runs/{run.run_id}" + (f"?{query}" if query else "")
    headers = [(b"x-api-key", key.encode())] if key else []
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


def _viewer_session() -> str:
    """Return the session id of a staff user allowed to view, not change, runs."""
    return staff(perms=VIEW_ALL).cookies["sessionid"].value


async def _close_code(socket: WebsocketCommunicator) -> int:
    message = await socket.receive_output(TIMEOUT)
    assert message["type"] == "websocket.close", message
    return message.get("code", 1000)


async def _until(socket: WebsocketCommunicator, event: str) -> list[dict]:
    """Receive messages up to and including the first ``event``."""
    received = []
    while not received or received[-1]["event"] != event:
        received.append(await socket.receive_json_from(TIMEOUT))
    return received


async def test_the_app_starts_the_runtime_before_its_first_connection(owner, no_runtime_yet):
    run = await db(_run)(owner)
    with pytest.raises(Unavailable):
        get_bridge()
    socket = _socket(run, owner.key, query="last_event_id=-1")
    await socket.connect(TIMEOUT)
    await get_bridge().publish_end(run.run_id, {"status": "success"})
    assert (await socket.receive_json_from(TIMEOUT))["event"] == "metadata"  # a read from the start opens with it
    assert (await socket.receive_json_from(TIMEOUT))["event"] == "end"
    assert get_worker() is not None
    await socket.disconnect()


async def test_a_just_finished_run_is_followed_to_its_end_marker(owner, runtime):
    """Its row says it ended before finalize published its last events and marker: the socket waits for them."""
    run = await db(_run)(owner)
    now = timezone.now()
    await db(Run.objects.filter(pk=run.pk).update)(started_at=now, finished_at=now)
    bridge = get_bridge()
    first = await bridge.publish(run.run_id, "values", {"n": 1})
    socket = _socket(run, owner.key, query=f"last_event_id={first}")
    await socket.connect(TIMEOUT)
    await asyncio.sleep(0.3)  # the publishes after the commit, drawn out past the reader's first idle
    await bridge.publish(run.run_id, "values", {"n": 2})
    await bridge.publish_end(run.run_id, {"status": "success"})
    received = await _until(socket, "end")
    assert [m["data"] for m in received] == [{"n": 2}, {"status": "success"}]
    assert await _close_code(socket) == 1000
    await socket.disconnect()


@pytest.mark.parametrize("key", [None, "not-a-key"], ids=["no-key", "bad-key"])
async def test_a_socket_without_identity_is_closed_4401(owner, runtime, key):
    run = await db(_run)(owner)
    socket = _socket(run, key)
    connected, _ = await socket.connect(TIMEOUT)
    assert connected
    assert await _close_code(socket) == CLOSE_UNAUTHENTICATED
    await socket.disconnect()


async def test_another_users_run_and_a_missing_run_are_closed_4404(owner, other, runtime):
    run = await db(_run)(owner)
    missing = Run(run_id=uuid.uuid4().hex, thread_id=run.thread_id)
    for target, key in ((run, other.key), (missing, owner.key)):
        socket = _socket(target, key)
        await socket.connect(TIMEOUT)
        assert await _close_code(socket) == CLOSE_NOT_FOUND
        await socket.disconnect()


async def test_replays_after_last_event_id_then_sends_the_end_and_closes_1000(owner, runtime):
    run = await db(_run)(owner)
    bridge = get_bridge()
    published = [("metadata", {"run_id": run.run_id}), ("values", {"n": 1}), ("messages", [{"c": "x"}, {}])]
    ids = [await bridge.publish(run.run_id, event, data) for event, data in published]
    await bridge.publish_end(run.run_id, {"status": "success", "values": {"n": 1}})

    socket = _socket(run, owner.key, query=f"last_event_id={ids[0]}")
    await socket.connect(TIMEOUT)
    received = await _until(socket, "end")

    assert [(m["event"], m["data"], m["id"]) for m in received[:-1]] == [
        (event, data, event_id) for (event, data), event_id in list(zip(published, ids, strict=True))[1:]
    ]
    assert received[-1]["data"] == {"status": "success", "values": {"n": 1}}
    assert await _close_code(socket) == 1000
    await socket.disconnect()


async def test_a_staff_session_with_the_view_right_watches_another_users_run_but_may_not_cancel_it(owner, runtime):
    """The refusals (no right, a staff user's API key) are in test_admin_console.py."""
    run = await db(_run)(owner, status="running")
    session = await db(_viewer_session)()

    watching = _socket(run, None, cookie=session)
    await watching.connect(TIMEOUT)
    assert (await watching.receive_json_from(TIMEOUT))["event"] == "metadata"
    await watching.send_json_to({"action": "cancel"})
    refused = await watching.receive_json_from(TIMEOUT)
    assert refused["data"]["message"] == "cancelling this run needs runs.change_run"
    await watching.disconnect()
    assert (await db(Run.objects.get)(pk=run.pk)).cancel_action == ""


async def test_a_finished_run_whose_stream_is_gone_closes_its_socket(owner, runtime):
    run = await db(_run)(owner, status="success")  # nothing of its stream is in the bridge: it expired
    socket = _socket(run, owner.key)
    await socket.connect(TIMEOUT)
    assert (await socket.receive_json_from(TIMEOUT))["event"] == "metadata"
    assert await _close_code(socket) == 1000
    await socket.disconnect()


async def test_a_message_that_is_not_a_cancel_is_answered_with_an_error(owner, runtime):
    run = await db(_run)(owner, status="running")
    socket = _socket(run, owner.key)
    await socket.connect(TIMEOUT)
    assert (await socket.receive_json_from(TIMEOUT))["event"] == "metadata"
    await socket.send_json_to({"action": "pause"})
    assert (await socket.receive_json_from(TIMEOUT))["event"] == "error"
    await socket.send_json_to({"action": "cancel", "cancel_action": "explode"})
    error = await socket.receive_json_from(TIMEOUT)
    assert error["data"]["message"] == "cancel_action must be interrupt or rollback"
    await socket.disconnect()
    assert (await db(Run.objects.get)(pk=run.pk)).cancel_action == ""


async def test_an_in_band_cancel_stops_the_running_run(owner, runtime):
    # 20 s over ~100 tokens: the first arrives at once, the last long after the test's timeout.
    run = await db(_run)(owner, text="/slow 20 " + "word " * 100, status="pending")
    assert await get_worker().dispatch(run.run_id)
    socket = _socket(run, owner.key)
    await socket.connect(TIMEOUT)
    await _until(socket, "messages")  # the reply is streaming: the run is under way

    await socket.send_json_to({"action": "cancel", "cancel_action": "interrupt"})
    received = await _until(socket, "end")

    assert received[-1]["data"]["status"] == "interrupted"
    assert await _close_code(socket) == 1000
    await socket.disconnect()
    stopped = await db(Run.objects.get)(pk=run.pk)
    assert (stopped.status, stopped.cancel_action) == ("interrupted", "interrupt")
