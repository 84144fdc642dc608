"""Store routes in-process: every route, both personas, bad input, TTL expiry."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import pytest
from django.db import connection

from checkpoints.runtime import close_sync_resources, sync_resources
from store.selectors import store_namespace_full, store_user_id

pytestmark = pytest.mark.django_db(transaction=True)

ITEM_FIELDS = {"namespace", "key", "value", "created_at", "updated_at"}


def label() -> str:
    return f"ns-{uuid.uuid4().hex[:10]}"


def put(persona, namespace, key, value, **extra):
    body = {"namespace": namespace, "key": key, "value": value, **extra}
    response = persona.client.put("/api/store/items", body, format="json")
    assert response.status_code == 204, response.content
    return response


def get(persona, namespace, key, **params):
    response = persona.client.get("/api/store/items", {"namespace": ".".join(namespace), "key": key, **params})
    assert response.status_code == 200, response.content
    return response.json()


def search(persona, namespace_prefix, **body):
    response = persona.client.post(
        "/api/store/items/search", {"namespace_prefix": namespace_prefix, **body}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()["items"]


def namespaces(persona, **body):
    response = persona.client.post("/api/store/namespaces", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()["namespaces"]


def delete(persona, namespace, key):
    response = persona.client.delete("/api/store/items", {"namespace": namespace, "key": key}, format="json")
    assert response.status_code == 204, response.content


def raw_get(persona, namespace, key):
    """Read the stored row itself, through the Store API but without our sweep."""
    full = store_namespace_full(user_id=store_user_id(user=persona.user), namespace=namespace)
    return sync_resources().store.get(full, key, refresh_ttl=False)


# -- put / get / delete ------------------------------------------------------------


def test_put_then_get_returns_the_sdk_item_with_the_namespace_as_written(owner):
    ns = [label(), "prefs"]
    put(owner, ns, "theme", {"color": "dark", "size": 14})
    item = get(owner, ns, "theme")
    assert set(item) == ITEM_FIELDS
    assert item["namespace"] == ns and item["key"] == "theme"
    assert item["value"] == {"color": "dark", "size": 14}
    for stamp in ("created_at", "updated_at"):
        assert datetime.fromisoformat(item[stamp]).tzinfo is not None


def test_put_replaces_the_value(owner):
    ns = [label()]
    put(owner, ns, "k", {"v": 1})
    put(owner, ns, "k", {"v": 2})
    assert get(owner, ns, "k")["value"] == {"v": 2}
    assert len(search(owner, ns)) == 1


def test_keys_and_labels_keep_their_whitespace(owner):
    ns = [label(), " spaced "]
    put(owner, ns, " key ", {"v": 1})
    assert get(owner, ns, " key ")["namespace"] == ns
    assert get(owner, ns, "key") is None


def test_get_of_a_missing_item_is_null(owner):
    assert get(owner, [label()], "nothing") is None


def test_delete_removes_the_item_and_a_missing_item_is_fine(owner):
    ns = [label()]
    put(owner, ns, "k", {"v": 1})
    delete(owner, ns, "k")
    assert get(owner, ns, "k") is None
    assert raw_get(owner, ns, "k") is None
    delete(owner, ns, "k")


def test_items_live_under_the_users_server_owned_root(owner):
    ns = [label()]
    put(owner, ns, "k", {"v": 1})
    stored = sync_resources().store.get(("users", str(owner.user.pk), *ns), "k")
    assert stored is not None and stored.value == {"v": 1}
    assert sync_resources().store.get(tuple(ns), "k") is None


# -- search ----------------------------------------------------------------------------


def test_search_returns_items_under_the_prefix_with_score(owner):
    root = label()
    put(owner, [root, "a"], "k1", {"n": 1, "kind": "x"})
    put(owner, [root, "a", "deep"], "k2", {"n": 2, "kind": "y"})
    put(owner, [root + "b"], "k3", {"n": 3})  # a sibling label sharing the text prefix
    items = search(owner, [root])
    assert {(tuple(i["namespace"]), i["key"]) for i in items} == {((root, "a"), "k1"), ((root, "a", "deep"), "k2")}
    assert all(set(i) == ITEM_FIELDS | {"score"} and i["score"] is None for i in items)
    assert [i["key"] for i in search(owner, [root], filter={"kind": "y"})] == ["k2"]
    assert [i["key"] for i in search(owner, [root], filter={"n": {"$gt": 1}})] == ["k2"]


def test_search_pages_with_limit_and_offset(owner):
    ns = [label()]
    for index in range(5):
        put(owner, ns, f"k{index}", {"i": index})
    first = search(owner, ns, limit=2)
    rest = search(owner, ns, limit=10, offset=2)
    assert len(first) == 2 and len(rest) == 3
    assert {i["key"] for i in first + rest} == {f"k{i}" for i in range(5)}


def test_search_with_an_empty_prefix_lists_only_the_callers_items(owner, other):
    mine, theirs = label(), label()
    put(owner, [mine], "k", {"v": 1})
    put(other, [theirs], "k", {"v": 2})
    keys = {(tuple(i["namespace"]), i["key"]) for i in search(owner, [], limit=1000)}
    assert ((mine,), "k") in keys and ((theirs,), "k") not in keys


def test_semantic_query_without_an_index_is_refused_not_ignored(owner):
    ns = [label()]
    put(owner, ns, "k", {"text": "hello"})
    response = owner.client.post("/api/store/items/search", {"namespace_prefix": ns, "query": "hello"}, format="json")
    assert response.status_code == 422
    assert "embedding index" in response.json()["detail"]
    assert [i["key"] for i in search(owner, ns, query="")] == ["k"]


# -- namespaces ------------------------------------------------------------------------


def test_namespaces_are_listed_as_written_with_prefix_suffix_and_depth(owner):
    root = label()
    for ns in ([root, "a"], [root, "a", "b"], [root, "c", "b"]):
        put(owner, ns, "k", {"v": 1})
    assert namespaces(owner, prefix=[root]) == [[root, "a"], [root, "a", "b"], [root, "c", "b"]]
    assert namespaces(owner, prefix=[root], suffix=["b"]) == [[root, "a", "b"], [root, "c", "b"]]
    assert namespaces(owner, prefix=[root], max_depth=2) == [[root, "a"], [root, "c"]]
    assert namespaces(owner, prefix=[root], limit=1, offset=1) == [[root, "a", "b"]]
    assert [root, "a"] in namespaces(owner, limit=1000)


def test_a_suffix_cannot_reach_into_the_root(owner):
    ns = [label()]
    put(owner, ns, "k", {"v": 1})
    uid = str(owner.user.pk)
    assert namespaces(owner, suffix=ns) == [ns]
    assert namespaces(owner, suffix=[uid, *ns]) == []
    assert namespaces(owner, suffix=["users", uid, *ns]) == []


# -- isolation ---------------------------------------------------------------------------


def test_another_users_items_are_invisible_on_every_route(owner, other):
    ns = [label(), "private"]
    put(owner, ns, "secret", {"v": "owner"})
    assert get(other, ns, "secret") is None
    assert search(other, ns) == [] and search(other, [ns[0]]) == []
    assert ns not in namespaces(other, limit=1000) and namespaces(other, prefix=[ns[0]]) == []
    delete(other, ns, "secret")
    assert get(owner, ns, "secret")["value"] == {"v": "owner"}


def test_two_users_same_namespace_and_key_do_not_collide(owner, other):
    ns = [label()]
    put(owner, ns, "k", {"v": "owner"})
    put(other, ns, "k", {"v": "other"})
    assert get(owner, ns, "k")["value"] == {"v": "owner"}
    assert get(other, ns, "k")["value"] == {"v": "other"}
    assert [i["value"] for i in search(owner, ns)] == [{"v": "owner"}]


def test_a_client_namespace_naming_another_root_stays_inside_its_own(owner, other):
    forged = ["users", str(other.user.pk), label()]
    put(owner, forged, "k", {"v": "owner"})
    assert get(other, forged[2:], "k") is None
    assert search(other, forged[2:]) == []
    assert get(owner, forged, "k")["namespace"] == forged
    assert forged in namespaces(owner, prefix=["users"])


def test_anonymous_is_refused_on_every_route(anonymous):
    body = {"namespace": ["a"], "key": "k", "value": {}}
    assert anonymous.put("/api/store/items", body, format="json").status_code == 401
    assert anonymous.get("/api/store/items", {"namespace": "a", "key": "k"}).status_code == 401
    assert anonymous.delete("/api/store/items", body, format="json").status_code == 401
    assert anonymous.post("/api/store/items/search", {}, format="json").status_code == 401
    assert anonymous.post("/api/store/namespaces", {}, format="json").status_code == 401


# -- bad input ----------------------------------------------------------------------------

GOOD_PUT = {"namespace": ["ok"], "key": "k", "value": {"v": 1}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"namespace": []}, "namespace"),
        ({"namespace": [""]}, "namespace"),
        ({"namespace": ["a", 1]}, "namespace"),
        ({"namespace": ["a.b"]}, "namespace"),
        ({"namespace": "a"}, "namespace"),
        ({"namespace": None}, "namespace"),
        ({"namespace": ["a\u0000b"]}, "namespace"),
        ({"key": None}, "key"),
        ({"key": ""}, "key"),
        ({"key": 5}, "key"),
        ({"value": [1]}, "value"),
        ({"value": "x"}, "value"),
        ({"value": None}, "value"),
        ({"ttl": -1}, "ttl"),
        ({"ttl": 0}, "ttl"),
        ({"ttl": "5"}, "ttl"),
        ({"ttl": True}, "ttl"),
        ({"index": True}, "index"),
        ({"index": "text"}, "index"),
    ],
)
def test_bad_put_is_422_naming_the_field_and_writes_nothing(owner, change, field):
    marker = label()
    body = {**GOOD_PUT, "namespace": [marker], **change}
    if body["key"] is None:
        del body["key"]
    if body["value"] is None and field == "value":
        del body["value"]
    response = owner.client.put("/api/store/items", body, format="json")
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(f"{field}:")
    assert search(owner, [], limit=1000) == []


def test_put_without_key_or_value_is_422(owner):
    for missing in ("key", "value", "namespace"):
        body = {k: v for k, v in GOOD_PUT.items() if k != missing}
        response = owner.client.put("/api/store/items", body, format="json")
        assert response.status_code == 422
        assert response.json()["detail"] == f"{missing}: This field is required."
    assert search(owner, [], limit=1000) == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"namespace": "", "key": "k"}, "namespace"),
        ({"namespace": "a..b", "key": "k"}, "namespace"),
        ({"key": "k"}, "namespace"),
        ({"namespace": "a"}, "key"),
        ({"namespace": "a", "key": "k", "refresh_ttl": "maybe"}, "refresh_ttl"),
        ({"namespace": "a", "key": "k", "refresh_ttl": "true"}, "refresh_ttl"),
    ],
)
def test_bad_get_is_422_naming_the_field(owner, params, field):
    response = owner.client.get("/api/store/items", params)
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(f"{field}:")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"namespace_prefix": ["a.b"]}, "namespace_prefix"),
        ({"namespace_prefix": "a"}, "namespace_prefix"),
        ({"filter": "x"}, "filter"),
        ({"filter": {"bad key!": 1}}, "filter"),
        ({"filter": {"n": {"$regex": "."}}}, "filter"),
        ({"limit": "10"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"query": 5}, "query"),
        ({"offset": 2**70}, "offset"),
        ({"filter": {"n": 2**70}}, "filter"),
        ({"filter": {"n": {"$gt": -(2**70)}}}, "filter"),
        ({"refresh_ttl": True}, "refresh_ttl"),
    ],
)
def test_bad_search_is_422_naming_the_field(owner, body, field):
    response = owner.client.post("/api/store/items/search", body, format="json")
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(f"{field}:")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prefix": [""]}, "prefix"),
        ({"suffix": ["a.b"]}, "suffix"),
        ({"max_depth": 0}, "max_depth"),
        ({"max_depth": "2"}, "max_depth"),
        ({"limit": 0}, "limit"),
        ({"offset": "1"}, "offset"),
    ],
)
def test_bad_namespace_listing_is_422_naming_the_field(owner, body, field):
    response = owner.client.post("/api/store/namespaces", body, format="json")
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(f"{field}:")


@pytest.mark.parametrize(
    ("body", "field"), [({"namespace": [], "key": "k"}, "namespace"), ({"namespace": ["a"]}, "key")]
)
def test_bad_delete_is_422_and_deletes_nothing(owner, body, field):
    put(owner, ["a"], "k", {"v": 1})
    response = owner.client.delete("/api/store/items", body, format="json")
    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"{field}:")
    assert get(owner, ["a"], "k") is not None


# -- TTL --------------------------------------------------------------------------------

# 0.01 minutes = 0.6 s. SQLite's sweep compares against CURRENT_TIMESTAMP,
# which has whole-second resolution, so expiry is checked a second later.
SHORT_TTL_MINUTES = 0.01
AFTER_EXPIRY_SECONDS = 0.6 + 1.1


def test_an_expired_item_is_returned_by_no_route_and_is_swept(owner):
    ns = [label(), "session"]
    put(owner, ns, "short", {"v": 1}, ttl=SHORT_TTL_MINUTES)
    put(owner, ns, "forever", {"v": 2})
    assert get(owner, ns, "short")["value"] == {"v": 1}
    assert {i["key"] for i in search(owner, ns)} == {"short", "forever"}

    time.sleep(AFTER_EXPIRY_SECONDS)
    assert {i["key"] for i in search(owner, ns)} == {"forever"}
    assert get(owner, ns, "short") is None
    assert raw_get(owner, ns, "short") is None  # deleted by the sweep, not just hidden
    assert get(owner, ns, "forever")["value"] == {"v": 2}


def test_an_expired_namespace_is_not_listed_and_a_long_ttl_survives(owner):
    short_ns, long_ns = [label()], [label()]
    put(owner, short_ns, "k", {"v": 1}, ttl=SHORT_TTL_MINUTES)
    put(owner, long_ns, "k", {"v": 1}, ttl=60)
    assert short_ns in namespaces(owner, limit=1000)
    time.sleep(AFTER_EXPIRY_SECONDS)
    listed = namespaces(owner, limit=1000)
    assert short_ns not in listed and long_ns in listed
    assert get(owner, long_ns, "k")["value"] == {"v": 1}


def test_a_put_without_ttl_clears_an_earlier_ttl(owner):
    ns = [label()]
    put(owner, ns, "k", {"v": 1}, ttl=SHORT_TTL_MINUTES)
    put(owner, ns, "k", {"v": 2})
    time.sleep(AFTER_EXPIRY_SECONDS)
    assert get(owner, ns, "k")["value"] == {"v": 2}


def stored_ttl_minutes(persona, namespace, key) -> float | None:
    """The TTL LangGraph's table records for the item (``None``: it never expires)."""
    full = store_namespace_full(user_id=store_user_id(user=persona.user), namespace=namespace)
    with connection.cursor() as cursor:
        cursor.execute("SELECT ttl_minutes FROM store WHERE prefix = %s AND key = %s", [".".join(full), key])
        return cursor.fetchone()[0]


def test_store_ttl_default_is_the_ttl_of_an_item_written_without_one(owner, settings):
    settings.DEERFLOW = {**settings.DEERFLOW, "STORE_DEFAULT_TTL": 30.0}
    ns = [label()]
    put(owner, ns, "plain", {"v": 1})
    put(owner, ns, "own", {"v": 1}, ttl=5)
    assert (stored_ttl_minutes(owner, ns, "plain"), stored_ttl_minutes(owner, ns, "own")) == (30, 5)
    # A graph writes through the Store itself: the Store built with the setting applies it too.
    close_sync_resources()
    try:
        full = store_namespace_full(user_id=store_user_id(user=owner.user), namespace=ns)
        sync_resources().store.put(full, "by-graph", {"v": 2})
        assert stored_ttl_minutes(owner, ns, "by-graph") == 30
    finally:
        close_sync_resources()  # the next user of the Store gets one built with the settings restored
