"""``/mcp`` on a real server through the official MCP Python SDK (``mcp``): tools, calls, sessions, resumption.

The SDK connects as it does everywhere (``server/discover`` first, then the
``initialize`` handshake this server speaks), lists the served graphs as
tools and calls one. A call in a session is resumable: a client that lost
its stream after the priming event gets the response by ``Last-Event-ID``,
through the SDK's own resumption, and after the server restarted.
"""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata
from mcp_types import CallToolRequest, CallToolRequestParams, CallToolResult

from tests.live.support import human

pytestmark = pytest.mark.live


@asynccontextmanager
async def mcp_session(server, user: str):
    """The SDK's client session on the server's /mcp, authenticated with ``user``'s API key, connected as the SDK does."""
    async with httpx2.AsyncClient(headers={"x-api-key": server.api_key(user)}, timeout=60) as http:
        async with streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await negotiate_auto(session)
                yield session


def final_text(result: CallToolResult) -> str:
    values = json.loads(result.content[0].text)
    return values["messages"][-1]["content"]


async def test_the_official_client_lists_and_calls_the_graphs(api_server):
    async with mcp_session(api_server, "alice") as session:
        assert session.initialize_result.protocol_version == "2025-11-25"
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert "lead_agent" in tools
        assert tools["lead_agent"].input_schema["type"] == "object"
        assert "messages" in tools["lead_agent"].input_schema.get("properties", {})
        result = await session.call_tool("lead_agent", human("hello over mcp"))
        assert result.is_error is False and final_text(result) == "echo: hello over mcp"
        # With a progress callback the SDK sends a progressToken: the model's text arrives as it streams.
        said: list[tuple[float, str]] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            said.append((value, message or ""))

        result = await session.call_tool("lead_agent", human("stream it"), progress_callback=progress)
        assert "".join(text for _, text in said) == final_text(result) == "echo: stream it"
        assert [value for value, _ in said] == sorted(value for value, _ in said)
        # An unknown tool is the protocol's invalid-params error, not a run.
        with pytest.raises(MCPError, match="Unknown tool: no_such_tool") as raised:
            await session.call_tool("no_such_tool", {})
        assert raised.value.error.code == -32602


async def test_a_call_resumes_after_the_stream_is_lost_and_after_a_restart(api_server):
    key = api_server.api_key("bob")
    headers = {"x-api-key": key, "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=60) as http:
        init = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        )
        assert init.status_code == 200 and init.json()["result"]["protocolVersion"] == "2025-06-18"
        session_id = init.headers["Mcp-Session-Id"]
        call = {
            "jsonrpc": "2.0",
            "id": "call-1",
            "method": "tools/call",
            "params": {"name": "lead_agent", "arguments": human("/slow 2")},
        }
        # The client reads the priming event's id, then loses the stream.
        async with http.stream("POST", "/mcp", json=call, headers={"Mcp-Session-Id": session_id}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            token = None
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    token = line[4:]
                    break
        assert token and token.endswith(".0")

    # The SDK's own resumption: the same request, its stream resumed with Last-Event-ID, in the same session.
    async with httpx2.AsyncClient(headers={"x-api-key": key, "mcp-session-id": session_id}, timeout=60) as http:
        async with streamable_http_client(f"{api_server.url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                tokens: list[str] = []

                async def seen(new: str) -> None:
                    tokens.append(new)

                request = CallToolRequest(params=CallToolRequestParams(name="lead_agent", arguments=human("/slow 2")))
                result = await session.send_request(
                    request,
                    CallToolResult,
                    metadata=ClientMessageMetadata(resumption_token=token, on_resumption_token_update=seen),
                )
    assert final_text(result) == "echo: /slow 2"  # the first call's run: resuming starts nothing new
    assert tokens and tokens[-1].endswith(".end")

    # After a restart the session and the finished call are still there: the response again, from the database.
    api_server.stop()
    api_server.start()
    async with httpx.AsyncClient(base_url=api_server.url, timeout=60) as http:
        resumed = await http.get(
            "/mcp", headers={"x-api-key": key, "Mcp-Session-Id": session_id, "Last-Event-ID": token}
        )
        assert resumed.status_code == 200
        data = next(line[6:] for line in resumed.text.splitlines() if line.startswith("data: {"))
        answer = json.loads(data)
        assert answer["id"] == "call-1" and answer["result"]["content"][0]["text"] == result.content[0].text


async def test_sessions_and_streams_are_their_owners_alone(api_server):
    async with httpx.AsyncClient(base_url=api_server.url, timeout=60) as http:
        alice = {"x-api-key": api_server.api_key("alice")}
        mallory = {"x-api-key": api_server.api_key("mallory")}
        init = await http.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, headers=alice
        )
        session_id = init.headers["Mcp-Session-Id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert (await http.post("/mcp", json=ping, headers={**alice, "Mcp-Session-Id": session_id})).status_code == 200
        # Another user's session id is the same 404 as one that never was.
        theirs = await http.post("/mcp", json=ping, headers={**mallory, "Mcp-Session-Id": session_id})
        never = await http.post("/mcp", json=ping, headers={**mallory, "Mcp-Session-Id": uuid.uuid4().hex})
        assert theirs.status_code == never.status_code == 404 and theirs.json() == never.json()
        stream = {"Mcp-Session-Id": session_id, "Last-Event-ID": f"{uuid.uuid4()}.0"}
        assert (await http.get("/mcp", headers={**alice, **stream})).status_code == 404
        # Without a session a call answers JSON when the run ends, as the Platform's stateless /mcp does.
        call = {"name": "lead_agent", "arguments": human("no session")}
        plain = await http.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": call}, headers=alice
        )
        assert plain.headers["content-type"].startswith("application/json") and "Mcp-Session-Id" not in plain.headers
        assert "result" in plain.json(), plain.text
        assert json.loads(plain.json()["result"]["content"][0]["text"])["messages"][-1]["content"] == "echo: no session"
        # Without credentials: 401, as every route.
        assert (await http.post("/mcp", json=ping)).status_code == 401
        # DELETE ends it; its id is then unknown.
        assert (await http.delete("/mcp", headers={**alice, "Mcp-Session-Id": session_id})).status_code == 204
        assert (await http.post("/mcp", json=ping, headers={**alice, "Mcp-Session-Id": session_id})).status_code == 404
        # Malformed messages are JSON-RPC errors, never a 500.
        bad = await http.post("/mcp", content=b"{nope", headers={**alice, "Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
        batch = await http.post("/mcp", json=[ping, ping], headers=alice)
        assert batch.status_code == 400 and batch.json()["error"]["code"] == -32600
        unknown = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "resources/list"}, headers=alice)
        assert unknown.json()["error"]["code"] == -32601


async def test_a_resumed_call_gets_the_progress_it_missed_once_then_the_response(api_server):
    key = api_server.api_key("carol")
    headers = {"x-api-key": key, "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=60) as http:
        init = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        session = {"Mcp-Session-Id": init.headers["Mcp-Session-Id"]}
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "lead_agent", "arguments": human("/slow 2"), "_meta": {"progressToken": "p"}},
        }
        seen: list[dict] = []
        last = None
        async with http.stream("POST", "/mcp", json=call, headers=session) as response:
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    last = line[4:]
                elif line.startswith("data: {"):
                    seen.append(json.loads(line[6:]))
                    if len(seen) == 2:  # two pieces of text, then the connection is lost
                        break
        assert last is not None and not last.endswith((".0", ".end"))
        resumed = await http.get("/mcp", headers={**session, "Last-Event-ID": last})
        rest = [json.loads(line[6:]) for line in resumed.text.splitlines() if line.startswith("data: {")]
    progress = [m for m in seen + rest if m.get("method") == "notifications/progress"]
    assert [m["params"]["progress"] for m in progress] == sorted({m["params"]["progress"] for m in progress})
    final = rest[-1]
    assert final["id"] == 9 and "result" in final
    text = json.loads(final["result"]["content"][0]["text"])["messages"][-1]["content"]
    assert "".join(m["params"]["message"] for m in progress) == text == "echo: /slow 2"
