"""PostgreSQL or Redis going away while a run works: the run still ends once, the thread stays usable.

The live server reaches the dependency through a ``TcpProxy`` the test cuts
for a few seconds (the outage's length is the point of these tests, so it is
a timed pause; everything else waits for the state it needs). Before the
fix a run whose end fell into a PostgreSQL outage stayed ``running`` for
good (finalize raised and nothing retried), and a Redis outage mid-stream
left the SSE client with neither an error nor a close.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.proxy import TcpProxy
from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, human, wait_status

pytestmark = [pytest.mark.live]

TERMINAL = {"success", "error", "interrupted"}
OUTAGE_SECONDS = 5


async def _wait_terminal(http: httpx.AsyncClient, thread_id: str, run_id: str, within: float = 90) -> dict:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        try:
            run = await http.get(f"/threads/{thread_id}/runs/{run_id}")
        except httpx.HTTPError:
            run = None
        if run is not None and run.status_code == 200 and run.json()["status"] in TERMINAL:
            return run.json()
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id} never reached a final status")


async def _assert_usable(http: httpx.AsyncClient, thread_id: str, run: dict) -> None:
    thread = (await http.get(f"/threads/{thread_id}")).json()
    assert thread["status"] != "busy", thread
    events = (await http.get(f"/threads/{thread_id}/runs/{run['run_id']}/events")).json()
    ends = [e for e in events if e["event_type"] == "run.end"]
    assert [e["content"]["status"] for e in ends] == [run["status"]], events
    again = await http.post(
        f"/threads/{thread_id}/runs/wait", json={"assistant_id": "lead_agent", "input": human("after the outage")}
    )
    assert again.status_code == 200, again.text
    assert again.json()["messages"][-1]["content"] == "echo: after the outage"


@pytest.mark.postgres_only
async def test_a_run_whose_end_falls_into_a_postgres_outage_still_ends_once(tmp_path):
    with fresh_postgres_database(DATABASE_URL) as direct:
        parts = urlsplit(direct)
        with TcpProxy(parts.port or 5432) as proxy:
            via_proxy = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"))
            server = LiveServer(tmp_path, database_url=via_proxy).setup().start()
            try:
                headers = {"x-api-key": server.api_key("alice")}
                async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
                    thread_id = (await http.post("/threads", json={})).json()["thread_id"]
                    body = {"assistant_id": "lead_agent", "input": human("/slow 2"), "stream_mode": ["messages-tuple"]}
                    run = (await http.post(f"/threads/{thread_id}/runs", json=body)).json()
                    client = get_client(url=server.url, api_key=headers["x-api-key"])
                    await wait_status(client, thread_id, run["run_id"], {"running"})
                    proxy.cut()
                    await asyncio.sleep(OUTAGE_SECONDS)  # the run's end falls inside the outage
                    proxy.restore()
                    final = await _wait_terminal(http, thread_id, run["run_id"])
                    await _assert_usable(http, thread_id, final)
            finally:
                server.stop()


@pytest.mark.backend_free  # Redis's behaviour, whatever the database: runs once
async def test_a_redis_outage_mid_stream_ends_the_stream_and_the_run(tmp_path):
    if not REDIS_URL:
        pytest.skip("needs Redis: set REDIS_URL")
    redis_port = urlsplit(REDIS_URL).port or 6379
    database = fresh_postgres_database(DATABASE_URL) if DATABASE_URL else nullcontext(None)
    with database as url, TcpProxy(redis_port) as proxy:
        via_proxy = f"redis://127.0.0.1:{proxy.port}/{urlsplit(REDIS_URL).path.strip('/') or 0}"
        config = {"stream_bridge": {"type": "redis"}, "channel_layer": {"type": "redis"}}
        # REDIS_URL overrides redis.url, so the proxy goes in the environment.
        server = LiveServer(tmp_path, config=config, database_url=url, environ={"REDIS_URL": via_proxy})
        server.setup().start()
        try:
            headers = {"x-api-key": server.api_key("alice")}
            async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
                thread_id = (await http.post("/threads", json={})).json()["thread_id"]
                body = {"assistant_id": "lead_agent", "input": human("/slow 3"), "stream_mode": ["messages-tuple"]}
                events: list[str] = []
                outage: asyncio.Task | None = None

                async def cut_for_a_while() -> None:
                    proxy.cut()
                    await asyncio.sleep(OUTAGE_SECONDS)
                    proxy.restore()

                async def follow() -> str:
                    nonlocal outage
                    async with http.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
                        location = response.headers["content-location"]
                        async for line in response.aiter_lines():
                            if line.startswith("event: "):
                                events.append(line[7:])
                                if line == "event: messages" and outage is None:
                                    outage = asyncio.ensure_future(cut_for_a_while())
                    return location.rsplit("/", 1)[1]

                run_id = await asyncio.wait_for(follow(), 40)  # the stream ends: it does not hang
                assert outage is not None, events
                await outage
                assert events[0] == "metadata", events
                assert events[-1] in ("error", "messages", "values"), events
                final = await _wait_terminal(http, thread_id, run_id)
                assert final["status"] == "error", final
                assert final["error"].startswith("The run's event stream could not be published"), final
                await _assert_usable(http, thread_id, final)
        finally:
            server.stop()
