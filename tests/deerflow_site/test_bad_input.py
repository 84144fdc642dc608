"""Hostile input at the edge: a clear 4xx ``{"detail"}`` naming the problem, and nothing written.

Raw bytes, not ``format="json"``: the escapes ``\\ud800``, ``\\u0000``, ``1e400``
and deep nesting must reach the parser exactly as a hostile client sends them.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.conf import settings

from checkpoints.runtime import sync_resources
from store.selectors import store_namespace_full, store_user_id
from tests.helpers import raw_checkpoint_count, run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

SURROGATE = b'"\\ud800"'
NUL = b'"a\\u0000b"'


def send(persona, method: str, url: str, raw: bytes):
    return persona.client.generic(method, url, data=raw, content_type="application/json")


def new_thread(persona, **body) -> str:
    response = persona.client.post("/api/threads", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def assert_refused(response, status: int, *needles: str) -> str:
    assert response.status_code == status, response.content
    detail = response.json()["detail"]
    for needle in needles:
        assert needle in detail, detail
    return detail


def store_rows(persona, namespace: list[str]) -> int:
    full = store_namespace_full(user_id=store_user_id(user=persona.user), namespace=namespace)
    return len(sync_resources().store.search(full, limit=100))


# -- text no backend can store -----------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "needles"),
    [
        (b'{"metadata": {"a": ' + SURROGATE + b"}}", ("metadata.a", "surrogate")),
        (b'{"metadata": {"a": ' + NUL + b"}}", ("metadata.a", "NUL")),
        (b'{"metadata": {' + SURROGATE + b": 1}}", ("metadata", "key", "surrogate")),
        (b'{"metadata": {"a\\u0000": 1}}', ("metadata", "key", "NUL")),
        (b'{"metadata": {"deep": [1, {"x": ' + NUL + b"}]}}", ("metadata.deep[1].x", "NUL")),
        (b'{"thread_id": ' + NUL + b"}", ("thread_id", "NUL")),
    ],
)
def test_unstorable_text_in_a_new_thread_is_422_and_creates_nothing(owner, raw, needles):
    before = ThreadMeta.objects.count()
    assert_refused(send(owner, "POST", "/api/threads", raw), 422, *needles)
    assert ThreadMeta.objects.count() == before
    # The owner's search still works (a stored surrogate used to break it for good).
    assert owner.client.post("/api/threads/search", {}, format="json").status_code == 200


def test_unstorable_text_in_a_patch_is_422_and_changes_nothing(owner):
    thread_id = new_thread(owner, metadata={"k": "v"})
    for raw in (b'{"metadata": {"a": ' + SURROGATE + b"}}", b'{"metadata": {"a": ' + NUL + b"}}"):
        assert_refused(send(owner, "PATCH", f"/api/threads/{thread_id}", raw), 422, "metadata.a")
    assert ThreadMeta.objects.get(thread_id=thread_id).metadata == {"k": "v"}
    assert owner.client.get(f"/api/threads/{thread_id}").status_code == 200


def test_unstorable_state_title_is_422_and_writes_no_checkpoint(owner):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi"])
    before = raw_checkpoint_count(thread_id)
    for text in (NUL, SURROGATE):
        raw = b'{"values": {"title": ' + text + b"}}"
        assert_refused(send(owner, "POST", f"/api/threads/{thread_id}/state", raw), 422, "values.title")
    assert raw_checkpoint_count(thread_id) == before
    assert owner.client.get(f"/api/threads/{thread_id}/state").status_code == 200


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (b'{"v": ' + NUL + b"}", "value.v"),
        (b'{"v": ' + SURROGATE + b"}", "value.v"),
        (b'{"v": 1e400}', "value.v"),
        (b'{"v": NaN}', "value.v"),
    ],
)
def test_unstorable_store_value_is_422_and_stores_nothing(owner, value, needle):
    namespace = [f"ns-{uuid.uuid4().hex[:8]}"]
    raw = b'{"namespace": ' + json.dumps(namespace).encode() + b', "key": "k", "value": ' + value + b"}"
    assert_refused(send(owner, "PUT", "/api/store/items", raw), 422, needle)
    assert store_rows(owner, namespace) == 0


def test_unstorable_store_namespace_label_and_filter_are_422(owner):
    raw = b'{"namespace": ["ok", ' + SURROGATE + b'], "key": "k", "value": {}}'
    detail = assert_refused(send(owner, "PUT", "/api/store/items", raw), 422, "item 1", "surrogate")
    assert detail.startswith("namespace: ")
    assert store_rows(owner, ["ok"]) == 0
    raw = b'{"namespace_prefix": [], "filter": {"k": ' + NUL + b"}}"
    assert_refused(send(owner, "POST", "/api/store/items/search", raw), 422, "filter.k", "NUL")


@pytest.mark.parametrize("suffix", ["state/%00", "runs/%00", "runs/%00/join", "state/a%00b"])
def test_nul_in_a_path_id_is_422(owner, suffix):
    thread_id = new_thread(owner)
    response = owner.client.get(f"/api/threads/{thread_id}/{suffix}")
    assert_refused(response, 422, "NUL")


def test_nul_in_a_query_string_is_422(owner):
    response = owner.client.get("/api/store/items", {"namespace": "a\x00b", "key": "k"})
    assert_refused(response, 422, "namespace", "NUL")
    thread_id = new_thread(owner)
    response = owner.client.get(f"/api/threads/{thread_id}/runs", {"status": "x\x00"})
    assert_refused(response, 422, "status", "NUL")


def test_anonymous_caller_with_a_nul_path_is_still_401(anonymous):
    assert anonymous.get("/api/threads/t/state/%00").status_code == 401


# -- numbers JSON cannot carry --------------------------------------------------


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"])
def test_non_finite_numbers_are_422_naming_them(owner, token):
    before = ThreadMeta.objects.count()
    detail = assert_refused(
        send(owner, "POST", "/api/threads", b'{"metadata": {"x": ' + token + b"}}"), 422, "metadata.x", "finite"
    )
    assert token.decode() in detail
    assert ThreadMeta.objects.count() == before


def test_a_non_finite_number_in_history_filter_is_422(owner):
    thread_id = new_thread(owner)
    raw = b'{"metadata": {"step": 1e400}}'
    assert_refused(send(owner, "POST", f"/api/threads/{thread_id}/history", raw), 422, "metadata.step", "finite")


# -- nesting -----------------------------------------------------------------------

ROUTES_WITH_BODIES = [
    ("POST", "/api/threads"),
    ("POST", "/api/threads/search"),
    ("POST", "/api/threads/count"),
    ("PATCH", "/api/threads/{t}"),
    ("POST", "/api/threads/{t}/state"),
    ("POST", "/api/threads/{t}/history"),
    ("POST", "/api/threads/{t}/branches"),
    ("PUT", "/api/store/items"),
    ("POST", "/api/store/items/search"),
    ("POST", "/api/threads/prune"),
]


@pytest.mark.parametrize(("method", "route"), ROUTES_WITH_BODIES)
def test_json_nested_10000_deep_is_422_on_every_body_route(owner, method, route):
    thread_id = new_thread(owner)
    before = (ThreadMeta.objects.count(), raw_checkpoint_count(thread_id))
    raw = b'{"metadata": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    assert_refused(send(owner, method, route.format(t=thread_id), raw), 422, "nested deeper", "64")
    assert (ThreadMeta.objects.count(), raw_checkpoint_count(thread_id)) == before


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_nesting_is_bounded_by_the_configured_depth(owner):
    limit = settings.DEERFLOW_CONFIG.limits.max_json_depth
    # The body itself is one level: {"metadata": <filter>}.
    at_limit = json.dumps({"metadata": nested(limit - 1)}).encode()
    assert send(owner, "POST", "/api/threads/search", at_limit).status_code == 200
    over = json.dumps({"metadata": nested(limit)}).encode()
    assert_refused(send(owner, "POST", "/api/threads/search", over), 422, f"limit of {limit} levels")
    # 900 deep used to be a 500 in SQLite's containment filter.
    deep = json.dumps({"metadata": nested(900)}).encode()
    assert_refused(send(owner, "POST", "/api/threads/search", deep), 422, "nested deeper")


# -- sizes -------------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_json_and_creates_nothing(owner):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert limit == settings.DEERFLOW_CONFIG.limits.max_body_bytes
    before = ThreadMeta.objects.count()
    raw = b'{"metadata": {"a": "' + b"x" * (limit + 1) + b'"}}'
    response = send(owner, "POST", "/api/threads", raw)
    assert_refused(response, 413, str(limit), "limits.max_body_bytes")
    assert response["Content-Type"] == "application/json"
    assert ThreadMeta.objects.count() == before


def test_thread_metadata_over_the_limit_is_422_on_create_and_patch(owner):
    limit = settings.DEERFLOW_CONFIG.limits.max_metadata_bytes
    before = ThreadMeta.objects.count()
    big = {"a": "x" * limit}
    response = owner.client.post("/api/threads", {"metadata": big}, format="json")
    assert_refused(response, 422, "metadata", str(limit), "limits.max_metadata_bytes")
    assert ThreadMeta.objects.count() == before
    # PATCH merges, so two halves that each fit are refused together.
    thread_id = new_thread(owner, metadata={"a": "x" * (limit // 2)})
    response = owner.client.patch(f"/api/threads/{thread_id}", {"metadata": {"b": "y" * (limit // 2)}}, format="json")
    assert_refused(response, 422, "metadata", "limits.max_metadata_bytes")
    assert set(ThreadMeta.objects.get(thread_id=thread_id).metadata) == {"a"}


# -- field-specific 500s -------------------------------------------------------------


def test_thread_id_with_surrounding_whitespace_is_422_not_trimmed(owner):
    before = ThreadMeta.objects.count()
    for thread_id in (" a", "a ", "\ta"):
        response = owner.client.post("/api/threads", {"thread_id": thread_id}, format="json")
        assert_refused(response, 422, "thread_id")
    assert ThreadMeta.objects.count() == before
    assert not ThreadMeta.objects.filter(thread_id="a").exists()


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [({"a b": 1}, "'a b'"), ({"a.b": 1}, "'a.b'"), ({"step": 2**70}, "64-bit")],
)
def test_bad_history_filter_is_422(owner, metadata, needle):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi"])
    response = owner.client.post(f"/api/threads/{thread_id}/history", {"metadata": metadata}, format="json")
    assert_refused(response, 422, "metadata", needle)


def test_history_filter_still_filters(owner):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi"])
    response = owner.client.post(f"/api/threads/{thread_id}/history", {"metadata": {"step": 1}}, format="json")
    assert response.status_code == 200
    assert [s["metadata"]["step"] for s in response.json()] == [1]


def test_store_ttl_past_datetime_is_422_and_stores_nothing(owner):
    namespace = [f"ns-{uuid.uuid4().hex[:8]}"]
    body = {"namespace": namespace, "key": "k", "value": {}, "ttl": 1e308}
    assert_refused(owner.client.put("/api/store/items", body, format="json"), 422, "ttl", "at most")
    assert store_rows(owner, namespace) == 0


def test_store_namespace_max_depth_past_sql_integers_is_422(owner):
    response = owner.client.post("/api/store/namespaces", {"max_depth": 2**70}, format="json")
    assert_refused(response, 422, "max_depth")


def test_branch_from_an_unknown_message_is_404_like_regenerate(owner):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi"])
    before = ThreadMeta.objects.count()
    branch = owner.client.post(f"/api/threads/{thread_id}/branches", {"message_id": "nope"}, format="json")
    regen = owner.client.post(
        f"/api/threads/{thread_id}/runs/regenerate/prepare", {"message_id": "nope"}, format="json"
    )
    assert regen.status_code == 404
    assert_refused(branch, 404, "Message nope not found")
    assert ThreadMeta.objects.count() == before
