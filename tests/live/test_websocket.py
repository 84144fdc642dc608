"""The WebSocket stream of a run, with the same identity and ownership checks as HTTP."""

from __future__ import annotations

import json

import pytest
from langgraph_sdk import get_client
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

pytestmark = pytest.mark.live


def ws_url(server, thread_id: str, run_id: str, **query) -> str:
    base = server.url.replace("http://", "ws://").removesuffix("/api")
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{base}/ws/threads/{thread_id}/runs/{run_id}" + (f"?{params}" if params else "")


async def start_run(server, text: str, user: str = "alice"):
    client = get_client(url=server.url, api_key=server.api_key(user))
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": text}]},
        stream_mode=["messages-tuple", "values"],
    )
    return client, thread_id, run["run_id"]


async def receive_all(websocket) -> list[dict]:
    messages = []
    try:
        async for raw in websocket:
            messages.append(json.loads(raw))
    except ConnectionClosed:
        pass
    return messages


async def test_websocket_carries_the_run_events_and_ends(api_server):
    _, thread_id, run_id = await start_run(api_server, "/slow 0.5 hello ws")
    url = ws_url(api_server, thread_id, run_id, api_key=api_server.api_key("alice"))
    async with connect(url) as websocket:
        messages = await receive_all(websocket)
    events = [m["event"] for m in messages]
    assert events[0] == "metadata" and events[-1] == "end"
    assert messages[-1]["data"]["status"] == "success"
    assert "".join(m["data"][0]["content"] for m in messages if m["event"] == "messages") == "echo: /slow 0.5 hello ws"
    ids = [m["id"] for m in messages]
    assert len(set(ids)) == len(ids)


async def test_the_server_log_names_the_handshake_without_its_key(api_server):
    _, thread_id, run_id = await start_run(api_server, "logged")
    key = api_server.api_key("alice")
    async with connect(ws_url(api_server, thread_id, run_id, api_key=key)) as websocket:
        await receive_all(websocket)
    log = api_server.log()
    assert f"/ws/threads/{thread_id}/runs/{run_id}?api_key=[redacted]" in log
    assert key not in log


async def test_websocket_header_key_and_replay_after_an_id(api_server):
    _, thread_id, run_id = await start_run(api_server, "abc def")
    headers = {"x-api-key": api_server.api_key("alice")}
    async with connect(ws_url(api_server, thread_id, run_id), additional_headers=headers) as websocket:
        everything = await receive_all(websocket)
    cut = everything[2]["id"]
    async with connect(
        ws_url(api_server, thread_id, run_id, last_event_id=cut), additional_headers=headers
    ) as websocket:
        resumed = await receive_all(websocket)
    assert [m["id"] for m in resumed] == [m["id"] for m in everything[3:]]


async def test_websocket_cancel_message(api_server):
    client, thread_id, run_id = await start_run(api_server, "/slow 6")
    url = ws_url(api_server, thread_id, run_id, api_key=api_server.api_key("alice"))
    async with connect(url) as websocket:
        first = json.loads(await websocket.recv())
        assert first["event"] == "metadata"
        await websocket.send(json.dumps({"action": "cancel"}))
        messages = await receive_all(websocket)
    assert messages[-1]["event"] == "end"
    assert messages[-1]["data"]["status"] == "interrupted"
    assert (await client.runs.get(thread_id, run_id))["status"] == "interrupted"


@pytest.mark.parametrize("who", ["anonymous", "wrong-key", "bob"])
async def test_websocket_refuses_strangers_with_a_close_code(api_server, who):
    _, thread_id, run_id = await start_run(api_server, "secret run")
    query = {"anonymous": {}, "wrong-key": {"api_key": "dfk_nope"}, "bob": {"api_key": api_server.api_key("bob")}}[who]
    async with connect(ws_url(api_server, thread_id, run_id, **query)) as websocket:
        with pytest.raises(ConnectionClosed) as excinfo:
            await websocket.recv()
    expected = 4404 if who == "bob" else 4401
    assert excinfo.value.rcvd.code == expected
