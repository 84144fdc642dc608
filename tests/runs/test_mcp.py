"""``/mcp`` in-process: what tools each caller sees, and the JSON (non-streaming) answer of a call."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def rpc(persona, method: str, params: dict | None = None, **headers):
    body = {"jsonrpc": "2.0", "id": 7, "method": method, **({"params": params} if params is not None else {})}
    return persona.client.post("/api/mcp", body, format="json", **headers)


def tool_names(persona) -> set[str]:
    answer = rpc(persona, "tools/list")
    assert answer.status_code == 200, answer.content
    return {tool["name"] for tool in answer.json()["result"]["tools"]}


def test_each_caller_sees_the_served_graphs_and_their_own_assistants_only(owner, other):
    created = owner.client.post(
        "/api/assistants",
        {"graph_id": "lead_agent", "name": "private helper", "description": "the owner's own"},
        format="json",
    )
    assert created.status_code == 200, created.content
    assert {"lead_agent", "private_helper"} <= tool_names(owner)
    assert "lead_agent" in tool_names(other) and "private_helper" not in tool_names(other)
    tools = {t["name"]: t for t in rpc(owner, "tools/list").json()["result"]["tools"]}
    assert tools["private_helper"]["description"] == "the owner's own"
    # Another user's assistant is an unknown tool, exactly like one that never was.
    theirs = rpc(other, "tools/call", {"name": "private_helper", "arguments": {}}).json()
    never = rpc(other, "tools/call", {"name": "never_was", "arguments": {}}).json()
    assert theirs["error"]["code"] == never["error"]["code"] == -32602
    assert theirs["error"]["message"].replace("private_helper", "X") == never["error"]["message"].replace(
        "never_was", "X"
    )


def test_bad_arguments_are_invalid_params_and_start_nothing(owner):
    from runs.models import Run

    bad = rpc(owner, "tools/call", {"name": "lead_agent", "arguments": "not an object"}).json()
    assert bad["error"]["code"] == -32602 and "arguments must be an object" in bad["error"]["message"]
    nameless = rpc(owner, "tools/call", {"arguments": {}}).json()
    assert nameless["error"]["code"] == -32602
    assert not Run.objects.filter(owner=owner.user).exists()


async def test_a_stateless_calls_answer_needs_no_row_once_its_end_marker_is_out(owner, runtime):
    """A call without a session is a stateless run: its row goes with its thread right after it ended, and
    the answer must not read it back (under load the deletion won that race: a 500 instead of the result)."""
    from channels.db import database_sync_to_async as db

    from core.bridge_runtime import get_bridge
    from runs import mcp
    from runs.models import Run, RunStatus
    from runs.services.admission import run_admit
    from threads.services import thread_create, thread_delete

    def admitted():
        thread, _ = thread_create(owner=owner.user, thread_id=None, metadata={"stateless": True})
        run, _ = run_admit(
            owner=owner.user, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs={}
        )
        Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCESS)  # it ran; its end marker follows
        return thread, run

    thread, run = await db(admitted)()
    values = {"messages": [{"type": "ai", "content": "echo: done"}]}
    await get_bridge().publish_end(run.run_id, {"status": "success", "error": None, "values": values})
    await db(thread_delete)(thread=thread)  # on_completion: delete, before the answer is read
    answer = await mcp.tool_call_result(run)
    assert answer == {"content": [{"type": "text", "text": '{"messages": [{"type": "ai", "content": "echo: done"}]}'}],
                      "isError": False}  # fmt: skip


def test_a_sessions_requests_touch_it_at_most_once_a_minute(owner):
    from datetime import timedelta

    from runs.models import McpSession

    init = rpc(owner, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    session_id = init["Mcp-Session-Id"]
    seen = McpSession.objects.get(pk=session_id).last_seen_at
    assert rpc(owner, "ping", HTTP_MCP_SESSION_ID=session_id).status_code == 200
    assert McpSession.objects.get(pk=session_id).last_seen_at == seen  # a second later: no write
    McpSession.objects.filter(pk=session_id).update(last_seen_at=seen - timedelta(minutes=2))
    assert rpc(owner, "ping", HTTP_MCP_SESSION_ID=session_id).status_code == 200
    assert McpSession.objects.get(pk=session_id).last_seen_at > seen - timedelta(seconds=5)  # a minute on: touched
