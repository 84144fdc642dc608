"""A thread id deleted and created again under open protocol-v2 streams, over SSE and WebSocket, in one process and two.

Clients choose thread ids (ticket numbers, SDK-minted ids), so an id is
reused. Alice follows ``reuse-…`` over both transports, deletes it, Bob
creates it and runs three runs with secrets, Bob deletes it, Alice creates it
again: her streams never carry Bob's runs and carry her new life from seq 1.
With two processes Alice's streams are on one, and every write (her delete,
Bob's thread and runs) goes through the other: the deletion reaches her
followers through Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, human, scaled_config

pytestmark = pytest.mark.live
CHANNELS = ["values", "updates", "messages", "tools", "lifecycle", "input", "checkpoints", "tasks", "custom"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server on this pass's backend, with its memory bridge."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        live = LiveServer(tmp_path_factory.mktemp("reuse"), database_url=url).setup().start()
        try:
            yield live
        finally:
            live.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two processes on one PostgreSQL and Redis whose followers re-read the database only every 60 s when idle.

    So a follower that stops at once on a deletion made in the other process was told through Redis.
    """
    if not DATABASE_URL or not REDIS_URL:
        pytest.skip("needs PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
    config = scaled_config()
    config["stream_bridge"]["heartbeat_seconds"] = 60
    with fresh_postgres_database(DATABASE_URL) as url:
        a = LiveServer(tmp_path_factory.mktemp("a"), config=config, database_url=url).setup().start()
        b = LiveServer(tmp_path_factory.mktemp("b"), config=config, database_url=url).start()
        b.keys = a.keys
        try:
            yield a, b
        finally:
            a.stop()
            b.stop()


class Follower:
    """Alice's open streams on one process: the SSE stream and a WebSocket subscription, frames kept raw."""

    def __init__(self, server, thread_id: str) -> None:
        self.server, self.thread_id = server, thread_id
        self.key = server.api_key("alice")
        self.frames: dict[str, list[dict]] = {"sse": [], "websocket": []}
        self.tasks: list[asyncio.Task] = []

    async def open(self) -> Follower:
        opened = [asyncio.Event(), asyncio.Event()]
        self.tasks = [
            asyncio.ensure_future(self._sse(opened[0])),
            asyncio.ensure_future(self._websocket(opened[1])),
        ]
        await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 20)
        return self

    async def _sse(self, opened: asyncio.Event) -> None:
        headers = {"x-api-key": self.key, "accept": "text/event-stream"}
        async with httpx.AsyncClient(timeout=None) as http:
            url = f"{self.server.url}/threads/{self.thread_id}/stream/events"
            async with http.stream("POST", url, json={"channels": CHANNELS}, headers=headers) as response:
                assert response.status_code == 200
                opened.set()
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        self.frames["sse"].append(json.loads(line[6:]))

    async def _websocket(self, opened: asyncio.Event) -> None:
        base = self.server.url.replace("http://", "ws://")
        url = f"{base}/threads/{self.thread_id}/stream/events"
        async with connect(url, additional_headers={"x-api-key": self.key}) as socket:
            await socket.send(
                json.dumps({"id": 1, "method": "subscription.subscribe", "params": {"channels": CHANNELS}})
            )
            async for raw in socket:
                frame = json.loads(raw)
                if frame.get("id") == 1:
                    assert frame["type"] == "success", frame
                    opened.set()
                elif frame.get("type") == "event":
                    self.frames["websocket"].append(frame)

    async def until(self, predicate, within: float = 30) -> None:
        """Wait until ``predicate(frames)`` holds on both transports (a stream that failed fails the wait)."""
        async with asyncio.timeout(within):
            while not all(predicate(frames) for frames in self.frames.values()):
                for task in self.tasks:
                    if task.done():
                        task.result()
                        raise AssertionError("a stream ended")
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _terminals(frames: list[dict]) -> list[str]:
    return [
        f["params"]["data"]["event"]
        for f in frames
        if f["method"] == "lifecycle" and not f["params"]["namespace"] and f["params"]["data"]["event"] != "running"
    ]


def _mentions(frames: list[dict], word: str) -> bool:
    return any(word in json.dumps(f) for f in frames)


async def _reuse(alice_on: LiveServer, writes_on: LiveServer) -> None:
    thread_id = f"reuse-{uuid.uuid4().hex[:8]}"
    alice = {"x-api-key": alice_on.api_key("alice")}
    bob = {"x-api-key": alice_on.api_key("bob")}
    api = writes_on.url
    async with httpx.AsyncClient(timeout=60) as http:

        async def run(headers: dict, text: str) -> None:
            body = {"assistant_id": "lead_agent", "input": human(text)}
            answer = await http.post(f"{api}/threads/{thread_id}/runs/wait", json=body, headers=headers)
            assert answer.status_code == 200, answer.text

        async def create(headers: dict) -> None:
            answer = await http.post(f"{api}/threads", json={"thread_id": thread_id}, headers=headers)
            assert answer.status_code == 200, answer.text

        async def delete(headers: dict) -> None:
            assert (await http.delete(f"{api}/threads/{thread_id}", headers=headers)).status_code == 204

        await create(alice)
        follower = await Follower(alice_on, thread_id).open()
        try:
            await run(alice, "alicefirst hello")
            await follower.until(lambda frames: _terminals(frames) == ["completed"])
            await delete(alice)
            await create(bob)
            for n in range(3):
                await run(bob, f"bobsecret{n} the launch code")
            await delete(bob)
            await create(alice)
            await run(alice, "aliceagain hello")
            # Until Alice's next life has ended on both, or Bob's runs arrived (they used to, from seq 1 + her last).
            await follower.until(lambda frames: len(_terminals(frames)) >= 2 or _mentions(frames, "bobsecret"))
        finally:
            await follower.close()
    for transport, frames in follower.frames.items():
        assert not _mentions(frames, "bobsecret"), f"Bob's runs reached Alice's {transport} stream"
        assert _terminals(frames) == ["completed", "completed"], transport
        # Each life whole, in order: 1..n, then the next from 1 (none of its first events skipped).
        seqs = [f["seq"] for f in frames]
        restart = seqs.index(1, 1) if 1 in seqs[1:] else len(seqs)
        assert seqs == [*range(1, restart + 1), *range(1, len(seqs) - restart + 1)], f"{transport}: {seqs}"


async def test_one_process(server):
    await _reuse(server, server)


@pytest.mark.postgres_only
async def test_two_processes(pair):
    a, b = pair
    await _reuse(a, b)


@pytest.mark.postgres_only
async def test_a_deletion_on_one_process_ends_the_join_stream_on_the_other_at_once(pair):
    a, b = pair
    headers = {"x-api-key": a.api_key("alice")}
    thread_id = f"reuse-{uuid.uuid4().hex[:8]}"
    run_done = asyncio.Event()
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:
        assert (await http.post(f"{b.url}/threads", json={"thread_id": thread_id})).status_code == 200

        async def join() -> None:
            async with http.stream("GET", f"{a.url}/threads/{thread_id}/stream") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if '"run_done"' in line:
                        run_done.set()

        joined = asyncio.ensure_future(join())
        try:
            body = {"assistant_id": "lead_agent", "input": human("hello")}
            assert (await http.post(f"{b.url}/threads/{thread_id}/runs/wait", json=body)).status_code == 200
            await asyncio.wait_for(run_done.wait(), 30)  # the run's end on A: its follower tails the thread's key
            assert (await http.delete(f"{b.url}/threads/{thread_id}")).status_code == 204
            # Idle re-reads are 60 s apart: ending well before means the deletion came through Redis.
            await asyncio.wait_for(joined, 10)
        finally:
            joined.cancel()
