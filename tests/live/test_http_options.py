"""langgraph.json's http options on a real server (tests/fixtures/http_options), through the official SDK.

``disable_assistants`` and ``disable_store`` take those routes away (404,
and out of the schema) while the rest serves; ``configurable_headers``
copies the request headers it names into the run's ``configurable`` (the
graph answers with them), never the API key however the patterns read;
``mount_prefix`` serves the API under ``/tenant-api`` too (SSE and
WebSocket included); ``logging_headers`` puts the headers it names on the
access line, never a credential.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
import websockets
from langgraph_sdk import get_client

from tests.live.server import project_server
from tests.live.support import human

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "http_options"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("http-options"), PROJECT / "langgraph.json") as live:
        yield live


async def test_disabled_families_are_not_served_and_the_rest_is(server):
    headers = {"x-api-key": server.api_key("runner")}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
        assert (await http.post("/assistants/search", json={})).status_code == 404
        assert (await http.get("/store/items", params={"namespace": "a", "key": "k"})).status_code == 404
        assert (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})).status_code == 404
        assert (await http.post("/threads/search", json={})).status_code == 200
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert "/api/threads" in paths and not any(
            p.startswith(("/api/store", "/api/assistants", "/api/mcp")) for p in paths
        )


async def test_configurable_headers_reach_the_graph_and_the_api_key_never_does(server):
    key = server.api_key("runner")
    client = get_client(url=server.url, api_key=key, headers={"x-tenant-id": "acme", "x-tenant-secret": "no"})
    thread = await client.threads.create()
    values = await client.runs.wait(thread["thread_id"], "tenant", input=human("hi"))
    assert values["messages"][-1]["content"] == "acme|None"
    run = (await client.runs.list(thread["thread_id"]))[0]
    configurable = run["kwargs"]["config"]["configurable"]
    assert configurable["x-tenant-id"] == "acme" and "x-tenant-secret" not in configurable
    assert key not in str(run)


async def test_the_api_is_served_under_the_mount_prefix_too(server):
    root = server.url.removesuffix("/api")
    client = get_client(url=f"{root}/tenant-api", api_key=server.api_key("runner"), headers={"x-tenant-id": "p"})
    thread = await client.threads.create()
    chunks = [part async for part in client.runs.stream(thread["thread_id"], "tenant", input=human("hi"))]
    assert chunks[-1].data["messages"][-1]["content"] == "p|None"
    # The same thread under /api: one API, two paths.
    assert await get_client(url=server.url, api_key=server.api_key("runner")).threads.get(thread["thread_id"])
    async with httpx.AsyncClient(base_url=root, timeout=30) as http:
        assert (await http.get("/tenant-api/ok")).status_code == 200
        assert (await http.get("/tenant-apiX/ok")).status_code == 404
        assert (await http.post("/tenant-api/assistants/search", json={})).status_code == 404  # still disabled
    # The protocol-v2 WebSocket too: the handshake is accepted (an unknown path's is refused).
    ws_root = root.replace("http://", "ws://")
    query = f"?api_key={server.api_key('runner')}"
    async with websockets.connect(f"{ws_root}/tenant-api/threads/{thread['thread_id']}/stream/events{query}"):
        pass
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(f"{ws_root}/tenant-apiX/threads/{thread['thread_id']}/stream/events{query}"):
            pass


async def test_logging_headers_reach_the_access_line_and_credentials_never_do(server):
    key = server.api_key("logger")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        response = await http.post(
            "/threads/search",
            json={},
            headers={"x-api-key": key, "x-request-id": "req-4711", "authorization": "Bearer sekrit"},
        )
    assert response.status_code == 200
    line = next(line for line in server.log().splitlines() if "req-4711" in line)
    assert '"POST /api/threads/search' in line and 'headers={"x-request-id":"req-4711"}' in line
    assert key not in server.log() and "sekrit" not in server.log()


async def test_configurable_headers_reach_runs_started_by_protocol_commands_too(server):
    """``run.start`` over the protocol-v2 HTTP commands and over the WebSocket copies the same headers."""
    key = server.api_key("runner")
    headers = {"x-api-key": key, "x-tenant-id": "proto", "x-tenant-secret": "no"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
        thread_id = f"proto-{uuid.uuid4().hex[:8]}"
        start = {"id": 1, "method": "run.start", "params": {"assistant_id": "tenant", "input": human("hi")}}
        answer = await http.post(f"/threads/{thread_id}/commands", json=start)
        assert answer.json()["type"] == "success", answer.text
        client = get_client(url=server.url, api_key=key)
        [run] = await client.runs.list(thread_id)
        await client.runs.join(thread_id, run["run_id"])
        configurable = (await client.runs.get(thread_id, run["run_id"]))["kwargs"]["config"]["configurable"]
        assert configurable["x-tenant-id"] == "proto" and "x-tenant-secret" not in configurable
    ws_url = server.url.replace("http://", "ws://") + f"/threads/ws-{uuid.uuid4().hex[:8]}/stream/events"
    async with websockets.connect(f"{ws_url}?api_key={key}", additional_headers={"x-tenant-id": "socket"}) as socket:
        await socket.send(json.dumps(start))
        while (reply := json.loads(await socket.recv())).get("id") != 1:
            pass
        assert reply["type"] == "success", reply
    thread_id = ws_url.rsplit("/threads/", 1)[1].split("/")[0]
    [run] = await client.runs.list(thread_id)
    await client.runs.join(thread_id, run["run_id"])
    assert (await client.runs.get(thread_id, run["run_id"]))["kwargs"]["config"]["configurable"][
        "x-tenant-id"
    ] == "socket"
