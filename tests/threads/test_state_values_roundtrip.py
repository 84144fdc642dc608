"""What a state update stores, every thread route can read back: 2xx or 4xx, never a 500.

- ``messages`` is stored as ``add_messages`` would store it, in both modes:
  strings, dicts and ``(role, content)`` pairs become message objects with
  ids; what cannot become a message is a 422 that writes nothing.
- Replacing a reducer field that has no value yet stores the value, not
  LangGraph's ``Overwrite`` wrapper (DeerFlow #4380).
- A thread whose state holds odd values (a title that is not text, messages
  a graph stored as plain data) answers every thread route with 2xx or 4xx.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Overwrite
from typing_extensions import TypedDict

from checkpoints.accessor import state_accessor
from core.errors import Invalid
from tests.helpers import raw_checkpoint_count, run_turns
from tests.threads.test_state_modes import create_thread, process_in_mode

pytestmark = pytest.mark.django_db(transaction=True)


class TaggedState(MessagesState):
    """An optional list with a reducer: no default value, so the channel starts empty."""

    tags: Annotated[list[str] | None, operator.add]


def _tag(state: TaggedState) -> dict[str, Any]:
    return {"tags": ["seen"]}


tagged = StateGraph(TaggedState)
tagged.add_node("tag", _tag)
tagged.add_edge(START, "tag")


class LooseState(TypedDict, total=False):
    """A graph whose ``messages`` is plain data (no reducer): it keeps whatever it is given."""

    messages: list
    title: Any


def _keep(state: LooseState) -> dict[str, Any]:
    return {}


loose = StateGraph(LooseState)
loose.add_node("keep", _keep)
loose.add_edge(START, "keep")

GRAPHS = {
    "tagged": "tests.threads.test_state_values_roundtrip:tagged",
    "loose": "tests.threads.test_state_values_roundtrip:loose",
}


@pytest.fixture
def test_graphs(settings):
    from checkpoints.graphs import graph_cache

    settings.DEERFLOW = {**settings.DEERFLOW, "GRAPHS": {**settings.DEERFLOW["GRAPHS"], **GRAPHS}}
    yield
    graph_cache.clear()


@pytest.fixture(params=["full", "delta"])
def mode(request, settings):
    with process_in_mode(settings, request.param):
        yield request.param


def graph_thread(owner, graph_id: str) -> str:
    response = owner.client.post("/api/threads", {"metadata": {"graph_id": graph_id}}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def update(owner, thread_id: str, values: Any):
    return owner.client.post(f"/api/threads/{thread_id}/state", {"values": values}, format="json")


def state_values(owner, thread_id: str) -> dict[str, Any]:
    response = owner.client.get(f"/api/threads/{thread_id}/state")
    assert response.status_code == 200, response.content
    return response.json()["values"]


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["type"], m["content"]) for m in messages]


# -- messages are stored as add_messages stores them -------------------------


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("garbage", [("human", "garbage")]),
        (
            [{"role": "user", "content": "x", "id": "hx"}, {"role": "assistant", "content": "y", "id": "ay"}],
            [("human", "x"), ("ai", "y")],
        ),
        ({"type": "human", "content": "one dict", "id": "h1"}, [("human", "one dict")]),
        ([["user", "a pair"], "and a string"], [("human", "a pair"), ("human", "and a string")]),
        (None, []),
    ],
)
def test_a_state_update_stores_messages_as_add_messages_would(owner, mode, sent, expected):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["hi"])
    assert update(owner, thread_id, {"messages": sent}).status_code == 200
    messages = state_values(owner, thread_id)["messages"]
    assert shape(messages) == expected
    assert all(m["id"] for m in messages), "add_messages gives every message an id"
    sent_ids = [m["id"] for m in (sent if isinstance(sent, list) else [sent]) if isinstance(m, dict)]
    assert [m["id"] for m in messages][: len(sent_ids)] == sent_ids, "ids sent are kept"
    # Read back as messages: the routes that walk them answer, and the next turn runs.
    answer = next((m["id"] for m in reversed(messages) if m["type"] == "ai"), "absent")
    for path in ("runs/regenerate/prepare", "branches"):
        response = owner.client.post(f"/api/threads/{thread_id}/{path}", {"message_id": answer}, format="json")
        assert response.status_code < 500, (path, response.content)
    run_turns(thread_id, ["next"])
    assert shape(state_values(owner, thread_id)["messages"])[-1] == ("ai", "echo: next")


def test_a_message_removal_that_cannot_apply_is_422_and_writes_nothing(owner, mode):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["hi"])
    before = raw_checkpoint_count(thread_id)
    response = update(owner, thread_id, {"messages": [{"type": "remove", "id": "nope", "content": ""}]})
    assert response.status_code == 422, response.content
    assert "values.messages" in response.json()["detail"]
    assert "nope" in response.json()["detail"]
    assert raw_checkpoint_count(thread_id) == before


def test_the_accessor_refuses_what_cannot_become_a_message(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["hi"])
    before = raw_checkpoint_count(thread_id)
    with pytest.raises(Invalid) as refused:
        state_accessor("lead_agent").update(thread_id, {"messages": [5]})
    assert refused.value.field == "values.messages"
    assert raw_checkpoint_count(thread_id) == before


# -- DeerFlow #4380: an Overwrite into an empty reducer channel ----------------


@pytest.mark.parametrize("replacement", [[], ["kept"]])
def test_replacing_an_optional_reducer_field_that_has_no_value_stores_the_value(owner, mode, test_graphs, replacement):
    thread_id = graph_thread(owner, "tagged")
    assert update(owner, thread_id, {"tags": replacement}).status_code == 200
    assert state_values(owner, thread_id)["tags"] == replacement
    # The next run adds to the value (it used to end "Overwrite + list").
    run_turns(thread_id, ["hi"], assistant_id="tagged")
    assert state_values(owner, thread_id)["tags"] == [*replacement, "seen"]


# -- odd state through every thread route -------------------------------------


def thread_routes(thread_id: str, checkpoint_id: str, message_id: str) -> list[tuple[str, str, Any]]:
    """Every route that reads a thread's state (or writes next to it)."""
    base = f"/api/threads/{thread_id}"
    return [
        ("get", base, None),
        ("patch", base, {"metadata": {"k": "v"}}),
        ("get", f"{base}/state", None),
        ("get", f"{base}/state/{checkpoint_id}", None),
        ("get", f"{base}/state?subgraphs=true", None),
        ("post", f"{base}/state/checkpoint", {"checkpoint": {"checkpoint_id": checkpoint_id}}),
        ("post", f"{base}/history", {"limit": 10}),
        ("get", f"{base}/history?limit=10", None),
        ("post", "/api/threads/search", {"limit": 100}),
        ("post", f"{base}/runs/regenerate/prepare", {"message_id": message_id}),
        ("post", f"{base}/branches", {"message_id": message_id}),
        ("post", f"{base}/branches", {"message_id": "absent"}),
        ("get", f"{base}/messages", None),
        ("get", f"{base}/messages/page", None),
        ("get", f"{base}/token-usage", None),
        ("get", f"{base}/storage", None),
        ("post", f"{base}/copy", {}),
        ("post", f"{base}/state", {"values": None, "as_node": "__copy__"}),
        ("post", f"{base}/state", {"values": {"title": "plain again"}}),
        ("delete", base, None),
    ]


def assert_every_route_answers(owner, thread_id: str, message_id: str = "absent") -> None:
    [head] = owner.client.get(f"/api/threads/{thread_id}/history?limit=1").json()
    for method, path, body in thread_routes(thread_id, head["checkpoint_id"], message_id):
        response = getattr(owner.client, method)(path, body, format="json")
        assert response.status_code < 500, (method, path, response.content)
        assert response.status_code < 300 or "detail" in response.json(), (method, path, response.content)


ODD_UPDATES = [
    {"title": 5},
    {"title": {"nested": [1, None]}},
    {"title": None},
    {"title": ""},
    {"title": ["a", "list"]},
    {"messages": "garbage"},
    {"messages": []},
    {"messages": None},
    {"messages": {"role": "user", "content": "one", "id": "only"}},
]


@pytest.mark.parametrize("values", ODD_UPDATES)
def test_every_thread_route_answers_a_thread_after_an_odd_state_update(owner, mode, values):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["hi", "there"])
    answer = state_values(owner, thread_id)["messages"][-1]["id"]
    assert update(owner, thread_id, values).status_code == 200
    assert_every_route_answers(owner, thread_id, answer)


@pytest.mark.parametrize(
    "messages",
    [
        ["a string", 5, None, {"id": "d1", "type": "ai", "content": "a dict"}],
        "not a list",
        {"id": "d1"},
    ],
)
def test_every_thread_route_answers_a_thread_whose_graph_stores_plain_data_as_messages(owner, test_graphs, messages):
    thread_id = graph_thread(owner, "loose")
    state_accessor("loose").graph.invoke(
        {"messages": messages, "title": {"not": "text"}}, state_accessor("loose").config(thread_id)
    )
    assert state_values(owner, thread_id)["messages"] == messages
    assert_every_route_answers(owner, thread_id, "d1")


def test_every_thread_route_answers_a_thread_holding_real_and_plain_messages(owner, test_graphs):
    thread_id = graph_thread(owner, "loose")
    real = HumanMessage(content="real", id="h1")
    state_accessor("loose").graph.invoke({"messages": [real, "plain"]}, state_accessor("loose").config(thread_id))
    assert_every_route_answers(owner, thread_id, "h1")


def test_a_head_whose_writes_the_graph_refuses_answers_409_on_its_reads(owner, test_graphs):
    # The wrapper saved as a value, as state updates did before #4380 was fixed.
    thread_id = graph_thread(owner, "tagged")
    acc = state_accessor("tagged")
    acc.graph.update_state(acc.config(thread_id), {"tags": Overwrite([])}, as_node="tag")
    with pytest.raises(TypeError):
        run_turns(thread_id, ["hi"], assistant_id="tagged")  # leaves writes "Overwrite + list" refuses
    response = owner.client.get(f"/api/threads/{thread_id}/state")
    assert response.status_code == 409, response.content
    assert response.json()["detail"].startswith(f"Thread {thread_id}: its state cannot be read (TypeError: ")
    [listed] = [
        t for t in owner.client.post("/api/threads/search", {}, format="json").json() if t["thread_id"] == thread_id
    ]
    assert "cannot be read" in listed["error"]
    assert_every_route_answers(owner, thread_id, "absent")


def test_a_state_update_repairs_a_head_whose_writes_the_graph_refuses(owner, test_graphs):
    thread_id = graph_thread(owner, "tagged")
    acc = state_accessor("tagged")
    acc.graph.update_state(acc.config(thread_id), {"tags": Overwrite([])}, as_node="tag")
    with pytest.raises(TypeError):
        run_turns(thread_id, ["hi"], assistant_id="tagged")
    assert update(owner, thread_id, {"tags": ["fixed"]}).status_code == 200
    run_turns(thread_id, ["again"], assistant_id="tagged")
    assert state_values(owner, thread_id)["tags"] == ["fixed", "seen"]
