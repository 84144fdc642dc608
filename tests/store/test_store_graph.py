"""Graphs see the same per-user Store as the routes: the demo agent's /remember and /recall."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from langchain_core.messages import HumanMessage

from checkpoints.accessor import astate_accessor, state_accessor
from checkpoints.runtime import aclose_async_resources
from store.selectors import USER_ID_CONFIG_KEY, store_item_search, store_user_id

pytestmark = pytest.mark.django_db(transaction=True)


def with_user(config: dict, user_id: str | None) -> dict:
    configurable = dict(config["configurable"])
    if user_id is not None:
        configurable[USER_ID_CONFIG_KEY] = user_id
    return {**config, "configurable": configurable}


def say(text: str, *, user_id: str | None, thread_id: str | None = None) -> str:
    """Run one turn of the real demo graph (sync twin, sync saver and Store); return the reply."""
    accessor = state_accessor("lead_agent")
    config = with_user(accessor.config(thread_id or f"mem-{uuid.uuid4().hex}"), user_id)
    result = accessor.graph.invoke({"messages": [HumanMessage(content=text)]}, config)
    return result["messages"][-1].content


async def asay(text: str, *, user_id: str | None) -> str:
    """See say(); the async twin with the loop's async saver and Store."""
    accessor = await astate_accessor("lead_agent", fresh_saver=True)
    config = with_user(accessor.config(f"amem-{uuid.uuid4().hex}"), user_id)
    result = await accessor.graph.ainvoke({"messages": [HumanMessage(content=text)]}, config)
    return result["messages"][-1].content


def test_remember_then_recall_across_invocations_and_users(owner, other):
    alice, bob = store_user_id(user=owner.user), store_user_id(user=other.user)
    assert say("/recall", user_id=alice) == "remembered: nothing"
    assert say("/remember likes tea", user_id=alice) == "noted: likes tea"
    assert say("/remember lives in Oslo", user_id=alice) == "noted: lives in Oslo"
    assert say("/remember likes coffee", user_id=bob) == "noted: likes coffee"
    # Fresh threads: nothing carries over but the Store.
    assert say("/recall", user_id=alice) == "remembered: likes tea; lives in Oslo"
    assert say("/recall", user_id=bob) == "remembered: likes coffee"


def test_recall_in_the_same_thread_sees_memories_of_an_earlier_turn(owner):
    user_id, thread_id = store_user_id(user=owner.user), f"mem-{uuid.uuid4().hex}"
    say("/remember first", user_id=user_id, thread_id=thread_id)
    assert say("/recall", user_id=user_id, thread_id=thread_id) == "remembered: first"


def test_graph_memories_are_the_users_memories_namespace_on_the_routes(owner, other):
    user_id = store_user_id(user=owner.user)
    say("/remember from the graph", user_id=user_id)
    response = owner.client.post("/api/store/items/search", {"namespace_prefix": ["memories"]}, format="json")
    assert [(i["namespace"], i["value"]) for i in response.json()["items"]] == [
        (["memories"], {"text": "from the graph"})
    ]
    other_view = other.client.post("/api/store/items/search", {"namespace_prefix": ["memories"]}, format="json")
    assert other_view.json()["items"] == []

    body = {"namespace": ["memories"], "key": "0-http", "value": {"text": "from http"}}
    assert owner.client.put("/api/store/items", body, format="json").status_code == 204
    assert say("/recall", user_id=user_id) == "remembered: from http; from the graph"
    assert say("/recall", user_id=store_user_id(user=other.user)) == "remembered: nothing"


def test_memory_commands_without_a_user_write_nothing():
    reply = say("/remember orphan", user_id=None)
    assert reply == "memory unavailable: no user (langgraph_auth_user_id) in the run config"
    assert say("/recall", user_id=None) == reply


async def test_async_twin_remembers_with_the_async_store_and_sync_readers_see_it():
    alice, bob = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    try:
        assert await asay("/remember async one", user_id=alice) == "noted: async one"
        assert await asay("/remember async two", user_id=alice) == "noted: async two"
        assert await asay("/remember bob's", user_id=bob) == "noted: bob's"
        assert await asay("/recall", user_id=alice) == "remembered: async one; async two"
        assert await asay("/recall", user_id=bob) == "remembered: bob's"
    finally:
        await aclose_async_resources()
    assert [i.value["text"] for i in store_item_search(user_id=bob, namespace_prefix=("memories",))] == ["bob's"]
    assert say("/recall", user_id=alice) == "remembered: async one; async two"


async def test_graphs_async_store_takes_ttls_on_every_backend(owner, closing_savers, settings):
    """Upstream's AsyncSqliteStore says it cannot (a base-class order slip); ours can, as its aput does."""
    from checkpoints.runtime import aclose_async_resources, async_resources
    from store.selectors import astore_item_get
    from store.services import astore_item_put

    settings.DEERFLOW = {**settings.DEERFLOW, "STORE_DEFAULT_TTL": 30.0}
    await aclose_async_resources()
    store = (await async_resources()).store
    assert store.supports_ttl
    user_id = str(owner.user.pk)
    await astore_item_put(user_id=user_id, namespace=["ttl"], key="default", value={"v": 1}, store=store)
    await astore_item_put(user_id=user_id, namespace=["ttl"], key="own", value={"v": 2}, ttl=5, store=store)

    def stored() -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT key, ttl_minutes FROM store WHERE prefix = %s ORDER BY key", [f"users.{user_id}.ttl"]
            )
            return cursor.fetchall()

    assert await sync_to_async(stored)() == [("default", 30.0), ("own", 5.0)]
    assert (await astore_item_get(user_id=user_id, namespace=["ttl"], key="own", store=store)).value == {"v": 2}
