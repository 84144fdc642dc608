"""The fast state/history path equals the plain one (an oracle, as for the history cache).

``GET /state`` and ``POST /history`` share decoded messages between the
snapshots of one read (``decode_memo``), encode each message once and embed
it in every entry (``StateEncoder``), and stream large answers. What they
return must parse to exactly what ``thread_state`` of an unshared read gives,
in both channel modes, on the suite's backend (SQLite or PostgreSQL), for
threads with tool calls, a hidden ``data:`` image, an update, pending writes
and an interrupt.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import StateSnapshot
from rest_framework.renderers import JSONRenderer

from checkpoints.accessor import state_accessor
from checkpoints.decode_memo import shared_decodes
from checkpoints.serialization import StateEncoder, thread_state
from tests.helpers import run_turns
from tests.threads.test_state_modes import create_thread, process_in_mode
from threads import api_state

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_CALL_UPDATE = {
    "values": {
        "messages": [
            {"type": "human", "content": "look it up", "id": "h-tool"},
            {
                "type": "ai",
                "content": "",
                "id": "ai-tool",
                "tool_calls": [{"name": "search", "args": {"q": "bytes", "n": 3}, "id": "call-1"}],
            },
            {"type": "tool", "content": "found 3", "tool_call_id": "call-1", "id": "tool-1"},
        ]
    },
    "as_node": "agent",
}


def build_thread(owner) -> str:
    """Turns, a tool-call state update, a hidden data: image, and an interrupt left pending at the head."""
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first", "second"])
    response = owner.client.post(f"/api/threads/{thread_id}/state", TOOL_CALL_UPDATE, format="json")
    assert response.status_code == 200, response.content
    run_turns(thread_id, ["/image look", "third", "/interrupt please"])
    return thread_id


def body(response) -> Any:
    assert response.status_code == 200, response.content[:500]
    raw = b"".join(response.streaming_content) if response.streaming else response.content
    return json.loads(raw)


def plain(value: Any) -> Any:
    """What the views returned before the fast path: thread_state() through DRF's JSON renderer."""
    return json.loads(JSONRenderer().render(value))


def plain_history(thread_id: str, **kwargs) -> list[dict[str, Any]]:
    return plain([thread_state(s) for s in state_accessor("lead_agent").history(thread_id, **kwargs)])


def assert_reads_equal(owner, thread_id: str) -> None:
    base = f"/api/threads/{thread_id}"
    newest_first = plain_history(thread_id, limit=None)
    assert len(newest_first) > 12
    middle = newest_first[len(newest_first) // 2]["checkpoint_id"]
    for limit in (1, 10, 100):
        assert body(owner.client.post(f"{base}/history", {"limit": limit}, format="json")) == plain_history(
            thread_id, limit=limit
        )
        assert body(owner.client.get(f"{base}/history?limit={limit}")) == plain_history(thread_id, limit=limit)
    cases = [
        ({"before": middle}, {"before": middle}),
        ({"before": {"configurable": {"checkpoint_id": middle}}}, {"before": middle}),
        ({"metadata": {"source": "loop"}}, {"metadata_filter": {"source": "loop"}}),
        ({"metadata": {"step": 2}}, {"metadata_filter": {"step": 2}}),
        (
            {"metadata": {"source": "update"}, "before": middle},
            {"metadata_filter": {"source": "update"}, "before": middle},
        ),
    ]
    for data, kwargs in cases:
        fast = body(owner.client.post(f"{base}/history", {"limit": 100, **data}, format="json"))
        assert fast == plain_history(thread_id, limit=100, **kwargs), data
        assert fast, data
    selected = body(owner.client.post(f"{base}/history", {"limit": 10, "select": ["values", "next"]}, format="json"))
    assert selected == [{"values": s["values"], "next": s["next"]} for s in plain_history(thread_id, limit=10)]
    accessor = state_accessor("lead_agent")
    assert body(owner.client.get(f"{base}/state")) == plain(thread_state(accessor.get(thread_id)))
    at_middle = plain(thread_state(accessor.get(thread_id, checkpoint_id=middle)))
    assert body(owner.client.get(f"{base}/state/{middle}")) == at_middle
    checkpoint = {"checkpoint": {"checkpoint_id": middle}}
    assert body(owner.client.post(f"{base}/state/checkpoint", checkpoint, format="json")) == at_middle


def assert_thread_has_every_shape(owner, thread_id: str) -> None:
    """Guard the oracle itself: the thread holds what the fast path must get right."""
    history = plain_history(thread_id, limit=None)
    head = history[0]
    assert head["interrupts"] and head["tasks"][0]["interrupts"], "an interrupt is pending at the head"
    messages = [m for state in history for m in state["values"].get("messages", [])]
    assert any(m.get("tool_calls") for m in messages)
    hidden = [m for m in messages if (m.get("additional_kwargs") or {}).get("hide_from_ui")]
    assert hidden and all(not isinstance(m["content"], list) or len(m["content"]) == 1 for m in hidden)


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_fast_state_and_history_equal_the_plain_path(settings, owner, mode):
    with process_in_mode(settings, mode):
        thread_id = build_thread(owner)
        assert_thread_has_every_shape(owner, thread_id)
        assert_reads_equal(owner, thread_id)


def test_streamed_history_equals_the_joined_one(settings, owner, monkeypatch):
    thread_id = build_thread(owner)
    joined = owner.client.post(f"/api/threads/{thread_id}/history", {"limit": 100}, format="json")
    assert not joined.streaming
    monkeypatch.setattr(api_state, "STREAM_ABOVE_BYTES", 1000)
    streamed = owner.client.post(f"/api/threads/{thread_id}/history", {"limit": 100}, format="json")
    assert streamed.streaming and streamed["Content-Type"] == "application/json"
    assert body(streamed) == body(joined) == plain_history(thread_id, limit=100)


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_one_read_builds_each_stored_message_once(settings, owner, mode):
    """Delta too: its snapshots hold the list inside an extension LangGraph decodes past the memo."""
    with process_in_mode(settings, mode):
        thread_id = create_thread(owner)
        run_turns(thread_id, ["first", "second", "third", "fourth"])
        accessor = state_accessor("lead_agent")
        with shared_decodes():
            shared = [
                s.values["messages"][0] for s in accessor.history(thread_id, limit=None) if s.values.get("messages")
            ]
        unshared = [
            s.values["messages"][0] for s in accessor.history(thread_id, limit=None) if s.values.get("messages")
        ]
    assert len(shared) > 6 and all(m is shared[0] for m in shared)
    assert len({id(m) for m in unshared}) > 1


def test_the_memo_wraps_langgraphs_extension_hook():
    """langgraph-checkpoint is pinned; an upgrade that renames the hook must fail here, not get slow."""
    saver = state_accessor("lead_agent").saver
    serde = getattr(saver, "inner", saver).serde
    assert isinstance(serde, JsonPlusSerializer)
    assert serde._unpack_ext_hook.__wrapped__ is not None


def test_an_integer_beyond_64_bits_falls_back_to_the_stdlib_encoder():
    """orjson refuses such integers; a snapshot holding one (a custom saver may) still encodes."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}}
    message = AIMessage(content="x", id="big-1")
    snapshot = StateSnapshot({"messages": [message], "n": 2**70}, (), config, {"step": 1}, "now", None, (), ())
    encoded = StateEncoder().state(snapshot)
    assert json.loads(encoded) == plain(thread_state(snapshot))
    assert json.loads(encoded)["values"]["n"] == 2**70
