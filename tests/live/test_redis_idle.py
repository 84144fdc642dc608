"""Redis deployments stay connected through silence longer than redis-py's 5 s socket timeout.

A channels-redis receive blocks 5 s (``BZPOPMIN``), the stream bridge's tail
blocks for a heartbeat or 15 s (``XREAD BLOCK``); with redis-py's default 5 s
socket timeout those reads used to die the first time Redis stayed silent: the
WebSocket closed 1011, the SSE stream stopped after ``metadata``, and the
worker's cancel listener was gone, leaving cancels to the lease poll.

On PostgreSQL two processes share the database and Redis: ``a`` executes, ``b``
only admits and streams (``execute_in_server: false``), so every stream and
cancel through ``b`` crosses processes. On SQLite one process plays both.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest
from langgraph_sdk import get_client
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.live.server import LiveServer, fresh_postgres_database

pytestmark = [pytest.mark.live]

DATABASE_URL = os.environ.get("DATABASE_URL")
# Longer than redis-py's default socket timeout (5 s), the one that used to cut reads.
SILENCE_SECONDS = 7
# A cancel through the channel layer lands in ~0.1 s; the lease poll (every
# lease_seconds / 3 = 20 s here) is what a dead listener falls back to.
CANCEL_BOUND_SECONDS = 1.5


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def redis_config(redis_url: str, **runs) -> dict:
    """The Scaling-out set-up of the README, with a lease long enough to tell the paths apart."""
    return {
        "stream_bridge": {"type": "redis"},
        "channel_layer": {"type": "redis"},
        "redis": {"url": redis_url},
        "runs": {"lease_seconds": 60, **runs},
    }


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(executing process, admitting process), started together; one process on SQLite."""
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        pytest.skip("needs Redis: set REDIS_URL")
    if not DATABASE_URL:
        a = LiveServer(tmp_path_factory.mktemp("a"), config=redis_config(redis_url)).setup().start()
        a.started_at = time.monotonic()
        try:
            yield a, a
        finally:
            a.stop()
        return
    with fresh_postgres_database(DATABASE_URL) as url:
        a = LiveServer(tmp_path_factory.mktemp("a"), config=redis_config(redis_url), database_url=url).setup().start()
        a.started_at = time.monotonic()
        admit_only = redis_config(redis_url, execute_in_server=False)
        b = LiveServer(tmp_path_factory.mktemp("b"), config=admit_only, database_url=url).start()
        b.keys = a.keys  # one database, one set of users and keys
        try:
            yield a, b
        finally:
            b.stop()
            a.stop()


def ws_url(server, thread_id: str, run_id: str) -> str:
    base = server.url.replace("http://", "ws://").removesuffix("/api")
    return f"{base}/ws/threads/{thread_id}/runs/{run_id}?last_event_id=-1"


async def follow_websocket(server, key: str, thread_id: str, run_id: str, seen: list[dict]) -> int | None:
    """Collect the messages into ``seen``; return the close code."""
    async with connect(ws_url(server, thread_id, run_id), additional_headers={"x-api-key": key}) as websocket:
        try:
            async for raw in websocket:
                seen.append(json.loads(raw))
        except ConnectionClosed:
            pass
    return websocket.close_code


async def follow_sse(server, key: str, thread_id: str, run_id: str, seen: list[str]) -> None:
    """Collect the event names and ``heartbeat`` comments into ``seen``."""
    headers = {"x-api-key": key, "Last-Event-ID": "-1"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
        async with http.stream("GET", f"/threads/{thread_id}/runs/{run_id}/stream") as response:
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    seen.append(line.removeprefix("event: "))
                elif line == ": heartbeat":
                    seen.append("heartbeat")


async def timed(follower, within: float) -> tuple[object, float]:
    """Return the follower's result (or the error that ended it) and how long it ran."""
    started = time.monotonic()
    try:
        result = await asyncio.wait_for(follower, within)
    except (TimeoutError, httpx.HTTPError) as exc:
        result = type(exc).__name__
    return result, time.monotonic() - started


async def wait_status(client, thread_id: str, run_id: str, wanted: set[str], within: float = 20) -> dict:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        run = await client.runs.get(thread_id, run_id)
        if run["status"] in wanted:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} stuck in {run['status']}, wanted {wanted}")


@pytest.mark.backend_free  # Redis's behaviour, whatever the database: runs once
async def test_websocket_and_sse_follow_a_run_queued_through_a_silence_past_the_socket_timeout(servers):
    a, b = servers
    key = a.api_key("alice")
    on_b = get_client(url=b.url, api_key=key)
    thread_id = (await on_b.threads.create())["thread_id"]
    blocker = await on_b.runs.create(
        thread_id, "lead_agent", input=human(f"/slow {SILENCE_SECONDS}"), stream_mode=["messages-tuple"]
    )
    queued = await on_b.runs.create(
        thread_id, "lead_agent", input=human("after the wait"), multitask_strategy="enqueue", stream_mode=["values"]
    )
    # The queued run's stream says `metadata`, then nothing until the blocker ends.
    messages: list[dict] = []
    events: list[str] = []
    within = SILENCE_SECONDS + 15
    (close_code, ws_seconds), (sse_end, sse_seconds) = await asyncio.gather(
        timed(follow_websocket(b, key, thread_id, queued["run_id"], messages), within),
        timed(follow_sse(b, key, thread_id, queued["run_id"], events), within),
    )
    assert (await on_b.runs.get(thread_id, blocker["run_id"]))["status"] == "success"
    names = [m["event"] for m in messages]
    seen = (
        f"WebSocket: {close_code} after {ws_seconds:.1f} s, {names}; SSE: {sse_end} after {sse_seconds:.1f} s, {events}"
    )
    assert close_code == 1000, seen
    assert names[0] == "metadata" and names[-1] == "end", seen
    assert messages[-1]["data"]["status"] == "success"
    assert messages[-2]["data"]["messages"][-1]["content"] == "echo: after the wait"
    assert sse_end is None, seen
    assert events[0] == "metadata" and events[-1] == "values", seen
    assert "heartbeat" in events, seen
    # Both really sat through the silence.
    assert min(ws_seconds, sse_seconds) > SILENCE_SECONDS - 1.5


@pytest.mark.postgres_only
async def test_cross_process_cancel_lands_at_once_after_the_listener_sat_idle(servers):
    a, b = servers
    key = a.api_key("alice")
    on_b = get_client(url=b.url, api_key=key)
    thread_id = (await on_b.threads.create())["thread_id"]
    # messages-tuple makes the demo model stream asynchronously: its sync path
    # sleeps in a thread that a cancel cannot stop (nor the server's exit).
    run = await on_b.runs.create(thread_id, "lead_agent", input=human("/slow 60"), stream_mode=["messages-tuple"])
    await wait_status(on_b, thread_id, run["run_id"], {"running"})
    # The executing process's listener must have idled past one socket timeout.
    await asyncio.sleep(max(0.0, a.started_at + SILENCE_SECONDS - time.monotonic()))
    latency = await cancel_latency(on_b, thread_id, run["run_id"])
    assert latency < CANCEL_BOUND_SECONDS, f"the cancel took {latency:.2f} s (the lease poll, not the listener)"


async def cancel_latency(client, thread_id: str, run_id: str) -> float:
    started = time.monotonic()
    await client.runs.cancel(thread_id, run_id, action="interrupt")
    await wait_status(client, thread_id, run_id, {"interrupted"}, within=30)
    return time.monotonic() - started


@pytest.mark.postgres_only
async def test_cross_process_cancel_lands_at_once_after_redis_dropped_the_listener(servers, redis_url):
    from tests.live.test_outage_recovery import kill_redis_clients_of

    a, b = servers
    key = a.api_key("alice")
    on_b = get_client(url=b.url, api_key=key)
    thread_id = (await on_b.threads.create())["thread_id"]
    run = await on_b.runs.create(thread_id, "lead_agent", input=human("/slow 60"), stream_mode=["messages-tuple"])
    await wait_status(on_b, thread_id, run["run_id"], {"running"})
    # Every Redis connection of the executing process: at least its listener's
    # BZPOPMIN (the bridge's only once it published).
    assert kill_redis_clients_of(a.process.pid, redis_url) >= 1
    latency = await cancel_latency(on_b, thread_id, run["run_id"])
    assert latency < CANCEL_BOUND_SECONDS, f"the cancel took {latency:.2f} s (the lease poll, not the listener)"
