"""The official langgraph-sdk store client against a real server: items, search, namespaces, TTL, isolation."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import UnprocessableEntityError

from tests.live.server import LiveServer

pytestmark = pytest.mark.live

# 0.01 minutes = 0.6 s; expiry is checked a second later (SQLite's sweep
# compares against CURRENT_TIMESTAMP, which has whole-second resolution).
SHORT_TTL_MINUTES = 0.01
AFTER_EXPIRY_SECONDS = 0.6 + 1.1


@pytest.fixture
def alice(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("alice"))


@pytest.fixture
def bob(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("bob"))


def label() -> str:
    return f"sdk-{uuid.uuid4().hex[:10]}"


async def test_sdk_put_get_search_list_delete(alice):
    root = label()
    await alice.store.put_item([root, "docs"], "d1", {"title": "One", "n": 1})
    await alice.store.put_item([root, "docs", "old"], "d2", {"title": "Two", "n": 2}, index=False)

    item = await alice.store.get_item([root, "docs"], "d1")
    assert item["namespace"] == [root, "docs"] and item["key"] == "d1"
    assert item["value"] == {"title": "One", "n": 1}
    assert item["created_at"] and item["updated_at"]

    found = await alice.store.search_items([root])
    assert {(tuple(i["namespace"]), i["key"]) for i in found["items"]} == {
        ((root, "docs"), "d1"),
        ((root, "docs", "old"), "d2"),
    }
    filtered = await alice.store.search_items([root], filter={"n": {"$gte": 2}}, limit=5)
    assert [i["key"] for i in filtered["items"]] == ["d2"]
    page = await alice.store.search_items([root], limit=1, offset=1)
    assert len(page["items"]) == 1

    listed = await alice.store.list_namespaces(prefix=[root])
    assert listed == {"namespaces": [[root, "docs"], [root, "docs", "old"]]}
    assert await alice.store.list_namespaces(prefix=[root], max_depth=2) == {"namespaces": [[root, "docs"]]}
    assert await alice.store.list_namespaces(prefix=[root], suffix=["old"]) == {"namespaces": [[root, "docs", "old"]]}

    await alice.store.delete_item([root, "docs"], "d1")
    assert await alice.store.get_item([root, "docs"], "d1") is None
    assert [i["key"] for i in (await alice.store.search_items([root]))["items"]] == ["d2"]


async def test_sdk_ttl_expires_on_every_route(alice):
    ns = [label()]
    await alice.store.put_item(ns, "short", {"v": 1}, ttl=SHORT_TTL_MINUTES)
    await alice.store.put_item(ns, "long", {"v": 2}, ttl=30)
    assert (await alice.store.get_item(ns, "short"))["value"] == {"v": 1}

    await asyncio.sleep(AFTER_EXPIRY_SECONDS)
    assert await alice.store.get_item(ns, "short") is None
    assert [i["key"] for i in (await alice.store.search_items(ns))["items"]] == ["long"]
    await alice.store.delete_item(ns, "long")
    assert ns not in (await alice.store.list_namespaces(limit=1000))["namespaces"]


async def test_sdk_bad_input_is_422(alice):
    for call in (
        alice.store.put_item([label()], "k", {"v": 1}, ttl=-5),
        alice.store.put_item([""], "k", {"v": 1}),
        alice.store.put_item([label()], "k", ["not", "an", "object"]),
        alice.store.search_items(["a"], refresh_ttl=True),
        alice.store.list_namespaces(max_depth=0),
    ):
        with pytest.raises(UnprocessableEntityError):
            await call


async def test_sdk_two_users_cannot_see_each_others_items(alice, bob):
    ns = [label(), "private"]
    await alice.store.put_item(ns, "secret", {"owner": "alice"})
    await bob.store.put_item(ns, "secret", {"owner": "bob"})
    await bob.store.put_item([label()], "bobs-only", {"owner": "bob"})

    assert (await alice.store.get_item(ns, "secret"))["value"] == {"owner": "alice"}
    assert (await bob.store.get_item(ns, "secret"))["value"] == {"owner": "bob"}
    alice_items = (await alice.store.search_items([], limit=1000))["items"]
    assert "bob" not in {i["value"].get("owner") for i in alice_items}
    assert {"namespace": ns, "value": {"owner": "alice"}}.items() <= next(
        i for i in alice_items if i["namespace"] == ns
    ).items()
    assert all(i["key"] != "bobs-only" for i in alice_items)
    alice_namespaces = (await alice.store.list_namespaces(limit=1000))["namespaces"]
    bob_namespaces = (await bob.store.list_namespaces(limit=1000))["namespaces"]
    assert not [n for n in alice_namespaces if n[0] == "users"]  # the root never shows
    assert {tuple(n) for n in bob_namespaces} - {tuple(n) for n in alice_namespaces}

    await bob.store.delete_item(ns, "secret")
    assert (await alice.store.get_item(ns, "secret"))["value"] == {"owner": "alice"}
    assert await bob.store.get_item(ns, "secret") is None


@pytest.mark.backend_free
async def test_memory_backend_serves_the_store_and_refuses_ttls(tmp_path):
    server = LiveServer(tmp_path, config={"database": {"backend": "memory"}}).start()
    try:
        key = re.search(r"API key\s*:\s*(\S+)", server.log()).group(1)
        client = get_client(url=server.url, api_key=key)
        await client.store.put_item(["mem"], "k", {"v": 1})
        assert (await client.store.get_item(["mem"], "k"))["value"] == {"v": 1}
        assert (await client.store.list_namespaces()) == {"namespaces": [["mem"]]}
        with pytest.raises(UnprocessableEntityError, match="^ttl: .*does not support TTLs"):
            await client.store.put_item(["mem"], "short", {"v": 1}, ttl=5)
        assert await client.store.get_item(["mem"], "short") is None
    finally:
        server.stop()
