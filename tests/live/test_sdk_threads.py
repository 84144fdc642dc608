"""The official langgraph-sdk client against a real server: threads, state, history, isolation."""

from __future__ import annotations

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

pytestmark = pytest.mark.live


@pytest.fixture
def alice(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("alice"))


@pytest.fixture
def bob(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("bob"))


async def test_sdk_thread_lifecycle(alice):
    thread = await alice.threads.create(metadata={"project": "sdk"}, graph_id="lead_agent")
    thread_id = thread["thread_id"]
    assert thread["metadata"] == {"project": "sdk", "graph_id": "lead_agent"}

    found = await alice.threads.search(metadata={"project": "sdk"}, limit=10)
    assert thread_id in [t["thread_id"] for t in found]
    assert await alice.threads.count(metadata={"project": "sdk"}) >= 1

    got = await alice.threads.get(thread_id)
    assert got["thread_id"] == thread_id and got["status"] == "idle"

    patched = await alice.threads.update(thread_id, metadata={"stage": 2})
    assert patched["metadata"]["stage"] == 2 and patched["metadata"]["project"] == "sdk"

    state = await alice.threads.get_state(thread_id)
    assert state["values"] == {}
    assert await alice.threads.get_history(thread_id) == []

    copy = await alice.threads.copy(thread_id)
    assert copy["thread_id"] != thread_id

    await alice.threads.delete(thread_id)
    with pytest.raises(NotFoundError):
        await alice.threads.get(thread_id)


async def test_sdk_create_with_supersteps_and_ttl_then_search_by_values_with_extract(alice, bob):
    supersteps = [
        {"updates": [{"values": {"messages": [{"type": "human", "content": "hi", "id": "h1"}]}, "as_node": "user"}]},
        {"updates": [{"values": {"messages": [{"type": "ai", "content": "hello", "id": "a1"}]}, "as_node": "agent"}]},
        {"updates": [{"values": None, "command": {"update": {"title": "sdk copy"}}, "as_node": "agent"}]},
    ]
    thread = await alice.threads.create(supersteps=supersteps, ttl={"ttl": 120, "strategy": "keep_latest"})
    thread_id = thread["thread_id"]
    assert [m["content"] for m in thread["values"]["messages"]] == ["hi", "hello"]
    assert len(await alice.threads.get_history(thread_id, limit=10)) == 3
    ttl = (await alice.threads.get(thread_id, include=["ttl"]))["ttl"]
    assert (ttl["strategy"], ttl["ttl_minutes"]) == ("keep_latest", 120) and ttl["expires_at"]
    await alice.threads.update(thread_id, metadata={"n": 1}, ttl=30)  # the SDK sends {"ttl": 30, "strategy": "delete"}
    assert (await alice.threads.get(thread_id, include=["ttl"]))["ttl"]["strategy"] == "delete"

    found = await alice.threads.search(
        values={"title": "sdk copy"},
        extract={"last": "values.messages[-1].content", "n": "metadata.n"},
        select=["thread_id"],
    )
    assert found == [{"thread_id": thread_id, "extracted": {"last": "hello", "n": 1}}]
    assert await alice.threads.count(values={"title": "sdk copy"}) == 1
    assert await bob.threads.search(values={"title": "sdk copy"}) == []


async def test_sdk_second_user_sees_nothing_of_the_first(alice, bob):
    thread = await alice.threads.create(metadata={"private": True})
    thread_id = thread["thread_id"]
    assert thread_id not in [t["thread_id"] for t in await bob.threads.search(limit=1000)]
    assert await bob.threads.count(metadata={"private": True}) == 0
    for call in (
        bob.threads.get(thread_id),
        bob.threads.get_state(thread_id),
        bob.threads.get_history(thread_id),
        bob.threads.update(thread_id, metadata={"x": 1}),
        bob.threads.copy(thread_id),
        bob.threads.delete(thread_id),
    ):
        with pytest.raises(NotFoundError):
            await call
    assert (await alice.threads.get(thread_id))["metadata"] == {"private": True}


async def test_sdk_assistants_read_side(alice):
    [assistant] = await alice.assistants.search(graph_id="lead_agent")
    assert assistant["assistant_id"] == "bee7d354-5df5-5f26-a978-10ea053f620d"
    assert await alice.assistants.count() >= 1
    assert (await alice.assistants.get("lead_agent"))["assistant_id"] == assistant["assistant_id"]
    graph = await alice.assistants.get_graph(assistant["assistant_id"])
    assert {n["id"] for n in graph["nodes"]} >= {"__start__", "agent", "__end__"}
    schemas = await alice.assistants.get_schemas(assistant["assistant_id"])
    assert "messages" in schemas["input_schema"]["properties"]
    with pytest.raises(NotFoundError):
        await alice.assistants.get("no-such-assistant")
