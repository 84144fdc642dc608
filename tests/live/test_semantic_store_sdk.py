"""langgraph.json ``store.index`` on a real server (tests/fixtures/semantic_store), through the official SDK.

The project's own embedding function (a deterministic word-bucket one) is
loaded at start-up; the server was migrated before the index was configured
(the PostgreSQL pass starts from a migrated template), so start-up creates the
vector table; items a graph writes and items a client puts are both ranked by
``client.store.search_items(query=…)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.live.server import project_server
from tests.live.support import human

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "semantic_store"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("semantic-store"), PROJECT / "langgraph.json") as live:
        yield live


async def test_items_from_graphs_and_clients_rank_by_meaning(server):
    client = get_client(url=server.url, api_key=server.api_key("alice"))
    thread = await client.threads.create()
    for text in ("my cat is called Miso", "the dentist appointment is on Friday"):
        values = await client.runs.wait(thread["thread_id"], "agent", input=human(f"/remember {text}"))
        assert values["messages"][-1]["content"] == f"noted: {text}"
    await client.store.put_item(["memories"], "pet", {"text": "Miso the cat likes tuna"})
    await client.store.put_item(["memories"], "quiet", {"text": "cat cat cat"}, index=False)

    found = (await client.store.search_items(["memories"], query="what is my cat called"))["items"]
    texts = [item["value"]["text"] for item in found]
    assert texts[0] == "my cat is called Miso" and "cat cat cat" not in texts
    assert texts[-1] == "the dentist appointment is on Friday"
    assert [item["score"] for item in found] == sorted((item["score"] for item in found), reverse=True)

    # Another user's memories never answer, whatever they say.
    stranger = get_client(url=server.url, api_key=server.api_key("mallory"))
    await stranger.store.put_item(["memories"], "bait", {"text": "what is my cat called"})
    again = (await client.store.search_items(["memories"], query="what is my cat called"))["items"]
    assert [item["key"] for item in again] == [item["key"] for item in found]


async def test_filters_apply_to_a_query(server):
    client = get_client(url=server.url, api_key=server.api_key("bob"))
    await client.store.put_item(["notes"], "a", {"text": "invoice overdue", "kind": "billing"})
    await client.store.put_item(["notes"], "b", {"text": "invoice paid", "kind": "archive"})
    found = (await client.store.search_items(["notes"], query="overdue invoice", filter={"kind": "archive"}))["items"]
    assert [item["key"] for item in found] == ["b"] and found[0]["score"] is not None
