"""Two server processes on one database share one Store: items, TTLs and graph memories."""

from __future__ import annotations

import asyncio
import os
import uuid
from contextlib import ExitStack

import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, fresh_postgres_database

pytestmark = pytest.mark.live

DATABASE_URL = os.environ.get("DATABASE_URL")

# Runs the real demo graph in its own process (manage.py shell) with the
# process's sync saver and Store, as the user the run executor would pass.
GRAPH_TURN = """
from django.contrib.auth import get_user_model
from langchain_core.messages import HumanMessage
from checkpoints.accessor import state_accessor
from store.selectors import USER_ID_CONFIG_KEY, store_user_id
user = get_user_model().objects.get(username={username!r})
accessor = state_accessor("lead_agent")
config = accessor.config({thread_id!r})
config["configurable"][USER_ID_CONFIG_KEY] = store_user_id(user=user)
result = accessor.graph.invoke({{"messages": [HumanMessage(content={text!r})]}}, config)
print("REPLY:" + result["messages"][-1].content)
"""


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    """Two server processes on one database: PostgreSQL (DATABASE_URL) or one SQLite folder."""
    tmp_path = tmp_path_factory.mktemp("two-processes")
    with ExitStack() as stack:
        database_url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        shared = {"database": {"sqlite_dir": str(tmp_path / "shared")}}
        first = LiveServer(tmp_path / "a", config=shared, database_url=database_url).setup().start()
        stack.callback(first.stop)
        second = LiveServer(tmp_path / "b", config=shared, database_url=database_url).start()
        stack.callback(second.stop)
        yield first, second


def graph_say(server: LiveServer, *, username: str, text: str) -> str:
    """Run one demo-graph turn in a fresh process on ``server``'s database; return the reply."""
    code = GRAPH_TURN.format(username=username, thread_id=f"proc-{uuid.uuid4().hex}", text=text)
    output = server.manage("shell", "-c", code)
    return output.split("REPLY:", 1)[1].strip()


async def test_an_item_put_through_one_process_is_read_through_the_other(two_servers):
    first, second = two_servers
    key_a, key_b = first.api_key("alice"), first.api_key("bob")
    alice_1, alice_2 = get_client(url=first.url, api_key=key_a), get_client(url=second.url, api_key=key_a)
    bob_2 = get_client(url=second.url, api_key=key_b)
    ns = ["shared", uuid.uuid4().hex[:8]]

    await alice_1.store.put_item(ns, "k", {"written_by": "first"})
    assert (await alice_2.store.get_item(ns, "k"))["value"] == {"written_by": "first"}
    assert [i["key"] for i in (await alice_2.store.search_items(ns))["items"]] == ["k"]
    assert ns in (await alice_2.store.list_namespaces(prefix=["shared"]))["namespaces"]
    assert await bob_2.store.get_item(ns, "k") is None
    assert (await bob_2.store.search_items([], limit=1000))["items"] == []

    await alice_2.store.delete_item(ns, "k")
    assert await alice_1.store.get_item(ns, "k") is None


async def test_a_ttl_set_through_one_process_expires_in_the_other(two_servers):
    first, second = two_servers
    key = first.api_key("alice")
    ns = ["ttl", uuid.uuid4().hex[:8]]
    await get_client(url=first.url, api_key=key).store.put_item(ns, "k", {"v": 1}, ttl=0.01)
    reader = get_client(url=second.url, api_key=key)
    assert (await reader.store.get_item(ns, "k"))["value"] == {"v": 1}
    await asyncio.sleep(0.6 + 1.1)
    assert await reader.store.get_item(ns, "k") is None
    assert (await reader.store.search_items(ns))["items"] == []


async def test_graph_memories_cross_processes_and_users(two_servers):
    first, second = two_servers
    alice = get_client(url=second.url, api_key=first.api_key("alice"))
    first.api_key("bob")

    assert graph_say(first, username="alice", text="/remember likes tea") == "noted: likes tea"
    items = (await alice.store.search_items(["memories"]))["items"]
    assert [(i["namespace"], i["value"]) for i in items] == [(["memories"], {"text": "likes tea"})]

    await get_client(url=first.url, api_key=first.api_key("alice")).store.put_item(
        ["memories"], "0-http", {"text": "via http"}
    )
    assert graph_say(second, username="alice", text="/recall") == "remembered: via http; likes tea"
    assert graph_say(second, username="bob", text="/recall") == "remembered: nothing"
