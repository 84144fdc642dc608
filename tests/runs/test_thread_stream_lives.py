"""Protocol-v2 thread streams through the real ASGI app, in one process: lives of a thread id, and subscriptions.

A thread id is the client's choice, so it is deleted and created again, by
its owner or by someone else. A stream follows one life of the id: it must
never carry another user's life, nor skip the events of the next life that is
the caller's. The log is written with the real services and published on the
process's memory bridge, as a run's log writer does; the deletion goes
through ``DELETE /api/threads/{id}``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from channels.db import database_sync_to_async as db
from channels.testing import ApplicationCommunicator, WebsocketCommunicator

from core.bridge_runtime import get_bridge
from deerflow_site.asgi import application
from runs.consumers import MAX_SUBSCRIPTIONS
from threads.services import thread_create
from threads.stream_follow import publish_thread_events
from threads.stream_log import PendingEvent, thread_stream_append, thread_stream_prune

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 10


@pytest.fixture
def slow_heartbeat(settings):
    """Idle re-reads far apart: a follower that stops promptly was told, it did not poll."""
    bridge_settings = settings.DEERFLOW_CONFIG.stream_bridge
    saved, bridge_settings.heartbeat_seconds = bridge_settings.heartbeat_seconds, 30
    yield
    bridge_settings.heartbeat_seconds = saved


async def _log(thread_id: str, run_id: str, texts: list[str], method: str = "custom") -> list[dict]:
    """Append events carrying ``texts`` as a run's writer does (commit, then publish); return their envelopes."""
    events = [PendingEvent(f"{run_id}:{i}", method, [], {"name": "said", "text": t}) for i, t in enumerate(texts)]
    envelopes = await db(thread_stream_append)(thread_id=thread_id, run_id=run_id, events=events)
    await publish_thread_events(get_bridge(), thread_id, envelopes)
    return envelopes


async def _create(persona, thread_id: str) -> None:
    await db(thread_create)(owner=persona.user, thread_id=thread_id, metadata={})


async def _delete(persona, thread_id: str) -> None:
    """DELETE /api/threads/{id} through the ASGI app (its announcement runs on this loop, as in a server)."""
    scope = {
        "type": "http",
        "method": "DELETE",
        "path": f"/api/threads/{thread_id}",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"x-api-key", persona.key.encode())],
    }
    http = ApplicationCommunicator(application, scope)
    await http.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await http.receive_output(TIMEOUT)
    assert start["status"] == 204, start
    while (await http.receive_output(TIMEOUT)).get("more_body"):
        pass
    await http.wait(TIMEOUT)


class SSE:
    """A streaming HTTP request through the ASGI app; ``events`` collects the ``data:`` envelopes."""

    def __init__(self, persona, method: str, path: str, body: dict | None = None) -> None:
        headers = [
            (b"host", b"testserver"),
            (b"x-api-key", persona.key.encode()),
            (b"content-type", b"application/json"),
        ]
        scope = {"type": "http", "method": method, "path": path, "query_string": b"", "headers": headers}
        self.body = json.dumps(body or {}).encode()
        headers.append((b"content-length", str(len(self.body)).encode()))
        self.http = ApplicationCommunicator(application, scope)
        self.events: list[dict] = []
        self.ended = False
        self._buffer = b""

    async def open(self) -> SSE:
        await self.http.send_input({"type": "http.request", "body": self.body, "more_body": False})
        start = await self.http.receive_output(TIMEOUT)
        assert start["status"] == 200, (start, await self.http.receive_output(TIMEOUT))
        return self

    async def until(self, predicate, within: float = TIMEOUT) -> list[dict]:
        """Read frames until ``predicate(events)`` holds (or the response ends); return the events."""
        async with asyncio.timeout(within):
            while not predicate(self.events) and not self.ended:
                message = await self.http.receive_output(within)
                self.ended = not message.get("more_body", False)
                self._buffer += message.get("body", b"")
                *frames, self._buffer = self._buffer.split(b"\r\n\r\n")
                for frame in frames:
                    for line in frame.decode().split("\r\n"):
                        if line.startswith("data: "):
                            self.events.append(json.loads(line[6:]))
        return self.events

    async def close(self) -> None:
        await self.http.send_input({"type": "http.disconnect"})
        try:
            await self.http.wait(TIMEOUT)
        except asyncio.CancelledError:
            pass


async def _socket(persona, thread_id: str) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(
        application, f"/api/threads/{thread_id}/stream/events", headers=[(b"x-api-key", persona.key.encode())]
    )
    connected, _ = await socket.connect(TIMEOUT)
    assert connected
    return socket


async def _command(socket, command_id: int, method: str, params: dict) -> tuple[list[dict], dict]:
    """Send one command; return the events that came before its response, and the response."""
    await socket.send_json_to({"id": command_id, "method": method, "params": params})
    events = []
    while (frame := await socket.receive_json_from(TIMEOUT)).get("id") != command_id or frame["type"] == "event":
        events.append(frame)
    return events, frame


async def _events(socket, count: int) -> list[dict]:
    return [await socket.receive_json_from(TIMEOUT) for _ in range(count)]


def _texts(events: list[dict]) -> list[str]:
    return [e["params"]["data"]["text"] for e in events if e.get("type") == "event"]


async def test_open_streams_never_carry_the_next_owners_life_and_send_the_callers_next_life_whole(
    owner, other, runtime, slow_heartbeat
):
    """Alice follows ``reuse-…`` over SSE and WebSocket, deletes it, Bob takes the id, then Alice again."""
    thread_id = f"reuse-{uuid.uuid4().hex[:8]}"
    await _create(owner, thread_id)
    await _log(thread_id, "alice-run", ["alice 1", "alice 2", "alice 3"])
    sse = await SSE(owner, "POST", f"/api/threads/{thread_id}/stream/events", {"channels": ["custom"]}).open()
    socket = await _socket(owner, thread_id)
    await socket.send_json_to({"id": 1, "method": "subscription.subscribe", "params": {"channels": ["custom"]}})
    assert _texts(await sse.until(lambda evs: len(evs) == 3)) == ["alice 1", "alice 2", "alice 3"]
    first = await _events(socket, 4)
    assert sorted(_texts(first)) == ["alice 1", "alice 2", "alice 3"]

    await _delete(owner, thread_id)
    await _create(other, thread_id)
    for n in range(3):  # the next owner's log starts over at seq 1 and passes the old ``seq > last``
        await _log(thread_id, f"bob-run-{n}", [f"bob secret {n}.{i}" for i in range(3)])
    await _delete(other, thread_id)
    await _create(owner, thread_id)
    again = await _log(thread_id, "alice-again", ["alice again 1", "alice again 2"])
    assert [e["seq"] for e in again] == [1, 2]

    # Until Alice's next life arrives, or Bob's: both used to (Bob's from seq 4 on, after Alice's 3).
    over_sse = await sse.until(lambda evs: any(t in ("alice again 2", "bob secret 2.2") for t in _texts(evs)))
    assert _texts(over_sse) == ["alice 1", "alice 2", "alice 3", "alice again 1", "alice again 2"]
    over_ws = await _events(socket, 2)
    assert _texts(over_ws) == ["alice again 1", "alice again 2"], "Bob's thread reached Alice's WebSocket"
    assert [e["seq"] for e in over_ws] == [1, 2]
    await sse.close()
    await socket.disconnect()


async def test_the_join_stream_ends_when_its_thread_is_deleted_without_waiting_for_an_idle_reread(
    owner, runtime, slow_heartbeat
):
    thread_id = f"reuse-{uuid.uuid4().hex[:8]}"
    await _create(owner, thread_id)
    join = await SSE(owner, "GET", f"/api/threads/{thread_id}/stream").open()
    await _log(thread_id, "r", ["run ends"], method="lifecycle")
    await join.until(lambda evs: bool(evs))  # the follower is past its start: it tails the thread's key
    started = time.monotonic()
    await _delete(owner, thread_id)
    await join.until(lambda evs: False, within=5)
    assert join.ended and time.monotonic() - started < 5  # heartbeats are 30 s apart: the deletion was announced
    await join.close()


async def test_a_since_from_a_deleted_life_is_a_resume_gap_not_a_silent_skip(owner, runtime):
    thread_id = f"reuse-{uuid.uuid4().hex[:8]}"
    await _create(owner, thread_id)
    await _log(thread_id, "second-life", ["one", "two"])
    sse = await SSE(
        owner, "POST", f"/api/threads/{thread_id}/stream/events", {"channels": ["custom"], "since": 40}
    ).open()
    [gap] = await sse.until(lambda evs: bool(evs))
    assert (gap["type"], gap["error"], gap["since"], gap["min_available_seq"]) == ("error", "resume_gap", 40, 1)
    await sse.close()
    socket = await _socket(owner, thread_id)
    await _command(socket, 1, "subscription.subscribe", {"channels": ["custom"], "since": 0})
    await _events(socket, 2)
    _, answer = await _command(socket, 2, "subscription.subscribe", {"channels": ["custom"], "since": 40})
    assert (answer["error"], answer["since"], answer["min_available_seq"]) == ("resume_gap", 40, 1)
    await socket.disconnect()


async def test_a_later_subscription_replays_from_its_own_since(owner, runtime):
    """Untrimmed 36-event log: a second ``since: 0`` replays all 36, a ``since: 30`` the last 6, first."""
    thread_id = f"subs-{uuid.uuid4().hex[:8]}"
    await _create(owner, thread_id)
    await _log(thread_id, "r", [f"e{i}" for i in range(36)])
    socket = await _socket(owner, thread_id)
    await _command(socket, 1, "subscription.subscribe", {"channels": ["custom"], "since": 0})
    assert len(await _events(socket, 36)) == 36
    replayed, answer = await _command(socket, 2, "subscription.subscribe", {"channels": ["custom"], "since": 0})
    assert answer["result"]["replayed_events"] == 36 and [e["seq"] for e in replayed] == list(range(1, 37))
    replayed, answer = await _command(socket, 3, "subscription.reconnect", {"channels": ["custom"], "since": 30})
    assert answer["result"]["replayed_events"] == 6 and [e["seq"] for e in replayed] == list(range(31, 37))
    await socket.disconnect()


async def test_a_later_subscription_older_than_the_kept_log_gets_resume_gap(owner, runtime, settings):
    """``max_events_per_thread: 40`` keeps 111..150: ``reconnect`` from 2 is a gap, from 140 replays 10."""
    thread_id = f"subs-{uuid.uuid4().hex[:8]}"
    await _create(owner, thread_id)
    await _log(thread_id, "r", [f"e{i}" for i in range(150)])
    settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread = 40
    try:
        assert await db(thread_stream_prune)(thread_id=thread_id) == 110
    finally:
        settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread = 0
    socket = await _socket(owner, thread_id)
    await _command(socket, 1, "subscription.subscribe", {"channels": ["custom"], "since": 110})
    assert [e["seq"] for e in await _events(socket, 40)] == list(range(111, 151))
    replayed, answer = await _command(socket, 2, "subscription.reconnect", {"channels": ["custom"], "since": 2})
    assert replayed == [] and answer["type"] == "error"
    assert (answer["error"], answer["since"], answer["min_available_seq"]) == ("resume_gap", 2, 111)
    replayed, answer = await _command(socket, 3, "subscription.reconnect", {"channels": ["custom"], "since": 140})
    assert answer["result"]["replayed_events"] == 10 and [e["seq"] for e in replayed] == list(range(141, 151))
    await socket.disconnect()


async def _tiny_subscriptions(persona, thread_id: str, pairs: int) -> float:
    """Return the seconds ``pairs`` subscribe/unsubscribe pairs of a channel the log lacks take on one socket."""
    socket = await _socket(persona, thread_id)
    await _command(socket, 1, "subscription.subscribe", {"channels": ["lifecycle"], "since": 0})
    await _events(socket, 40)
    started = time.monotonic()
    for n in range(pairs):
        _, answer = await _command(socket, 10 + 2 * n, "subscription.subscribe", {"channels": ["custom:none"]})
        assert answer["result"]["replayed_events"] == 0
        await _command(socket, 11 + 2 * n, "subscription.unsubscribe", answer["result"])
    elapsed = time.monotonic() - started
    await socket.disconnect()
    return elapsed


async def test_a_subscription_costs_what_it_replays_not_the_log(owner, runtime):
    """200 tiny subscribe/unsubscribe pairs cost the same on a 4,080-event log as on a 40-event one.

    Each used to re-read every row up to the pump's position and match each
    against every other subscription. Measured, 200 pairs on the small and the
    big log: SQLite 0.85 s and 13.8 s before, 0.64 s and 0.81 s now;
    PostgreSQL 0.89 s and 8.7 s before, 1.2 s and 1.1 s now (the database
    filters the channels; what is left is the commands' round trips).
    """
    small, big = f"subs-{uuid.uuid4().hex[:8]}", f"subs-{uuid.uuid4().hex[:8]}"
    for thread_id in (small, big):
        await _create(owner, thread_id)
    for page in range(40):
        await _log(big, f"r{page}", [f"t{page}.{i}" for i in range(101)], method="messages")
        for thread_id in (small, big):
            await _log(thread_id, f"l{page}", [f"run {page}"], method="lifecycle")
    on_small = await _tiny_subscriptions(owner, small, 200)
    on_big = await _tiny_subscriptions(owner, big, 200)
    assert on_big < 2 * on_small + 0.5, (on_small, on_big)


async def test_a_socket_holds_a_bounded_number_of_subscriptions(owner, runtime):
    thread_id = f"subs-{uuid.uuid4().hex[:8]}"
    await _create(owner, thread_id)
    socket = await _socket(owner, thread_id)
    for n in range(MAX_SUBSCRIPTIONS):
        _, answer = await _command(socket, n, "subscription.subscribe", {"channels": ["custom:none"]})
        assert answer["type"] == "success"
    _, refused = await _command(socket, 1000, "subscription.subscribe", {"channels": ["lifecycle"]})
    assert (refused["type"], refused["error"]) == ("error", "invalid_argument")
    assert f"at most {MAX_SUBSCRIPTIONS} subscriptions" in refused["message"]
    await _command(socket, 1001, "subscription.unsubscribe", {"subscription_id": answer["result"]["subscription_id"]})
    _, answer = await _command(socket, 1002, "subscription.subscribe", {"channels": ["lifecycle"]})
    assert answer["type"] == "success"
    await _log(thread_id, "r", ["the end"], method="lifecycle")  # the socket lives on, the last subscription too
    assert _texts(await _events(socket, 1)) == ["the end"]
    await socket.disconnect()
