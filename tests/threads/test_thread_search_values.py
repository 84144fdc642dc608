"""Thread search by head ``values`` (through the row's mirror of the head) and ``extract`` paths."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async as db

from tests.checkpoints.support import accessor, invoke
from tests.helpers import aexecute_run
from threads.models import ThreadMeta
from threads.search import MIRROR_VALUE_MAX_BYTES, threads_values_mirror_refresh

pytestmark = pytest.mark.django_db(transaction=True)


def create(persona, **body) -> str:
    response = persona.client.post("/api/threads", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def set_state(persona, thread_id: str, values: dict) -> None:
    response = persona.client.post(f"/api/threads/{thread_id}/state", {"values": values}, format="json")
    assert response.status_code == 200, response.content


def search(persona, **body):
    return persona.client.post("/api/threads/search", body, format="json")


def found(persona, **body) -> set[str]:
    response = search(persona, **body)
    assert response.status_code == 200, response.content
    return {t["thread_id"] for t in response.json()}


def count(persona, **body) -> int:
    response = persona.client.post("/api/threads/count", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


HELLO = [{"type": "human", "content": "hello", "id": "h1"}]


@pytest.fixture
def threads(owner, other) -> dict[str, str]:
    """Threads with known heads: two titled "alpha", one "beta", one empty, and another user's "alpha"."""
    made = {name: create(owner, metadata={"team": team}) for name, team in [("a1", "red"), ("a2", "blue")]}
    made["b"] = create(owner)
    made["empty"] = create(owner)
    made["theirs"] = create(other)
    for name in ("a1", "a2"):
        set_state(owner, made[name], {"title": "alpha", "messages": HELLO})
    set_state(owner, made["b"], {"title": "beta"})
    set_state(other, made["theirs"], {"title": "alpha"})
    return made


def test_values_filter_matches_the_head_values_of_the_callers_threads(owner, threads):
    assert found(owner, values={"title": "alpha"}) == {threads["a1"], threads["a2"]}
    assert found(owner, values={"title": "beta"}) == {threads["b"]}
    assert found(owner, values={"title": "gamma"}) == set()
    assert found(owner, values={"title": "alpha"}, metadata={"team": "red"}) == {threads["a1"]}
    assert found(owner, values={"title": "alpha"}, ids=[threads["a2"], threads["b"]]) == {threads["a2"]}
    # Containment at the top level, as for metadata: a listed message matches by its fields.
    assert found(owner, values={"messages": [{"content": "hello"}]}) == {threads["a1"], threads["a2"]}
    assert found(owner, values={"title": "alpha", "messages": [{"content": "bye"}]}) == set()
    assert found(owner, values={"title": 1}) == set()  # types matter


def test_values_count_and_pagination_total_are_exact(owner, threads):
    assert count(owner, values={"title": "alpha"}) == 2
    assert count(owner, values={"title": "alpha"}, metadata={"team": "blue"}) == 1
    first = search(owner, values={"title": "alpha"}, limit=1, sort_by="thread_id", sort_order="asc")
    assert first["X-Pagination-Total"] == "2" and first["X-Pagination-Next"] == "1"
    assert [t["thread_id"] for t in first.json()] == [min(threads["a1"], threads["a2"])]


def test_a_head_is_read_once_per_change_not_once_per_search(owner, threads):
    candidates = ThreadMeta.objects.filter(owner=owner.user)
    # The fixture's searches have not run yet: every thread is stale once.
    assert threads_values_mirror_refresh(queryset=candidates) == 4
    assert threads_values_mirror_refresh(queryset=candidates) == 0
    set_state(owner, threads["b"], {"title": "beta 2"})
    assert threads_values_mirror_refresh(queryset=candidates) == 1
    assert found(owner, values={"title": "beta 2"}) == {threads["b"]}
    assert threads_values_mirror_refresh(queryset=candidates) == 0


async def test_a_run_that_changes_the_head_is_seen_by_the_next_values_search(owner, closing_savers):
    thread_id = await db(create)(owner)
    assert await db(found)(owner, values={"title": "kickoff meeting"}) == set()
    thread = await db(ThreadMeta.objects.get)(pk=thread_id)
    await aexecute_run(
        owner, thread, "lead_agent", {"input": {"messages": [{"type": "human", "content": "kickoff meeting"}]}}
    )
    assert await db(found)(owner, values={"title": "kickoff meeting"}) == {thread_id}


def test_large_values_are_not_mirrored_and_a_large_filter_is_422(owner):
    big = "x" * MIRROR_VALUE_MAX_BYTES
    thread_id = create(owner)
    set_state(owner, thread_id, {"title": "t", "messages": [{"type": "human", "content": big, "id": "m"}]})
    assert found(owner, values={"title": "t"}) == {thread_id}
    assert set(ThreadMeta.objects.get(pk=thread_id).values_mirror) == {"title"}
    # A long messages list is not searchable (documented), and a filter that big is refused.
    assert found(owner, values={"messages": [{"id": "m"}]}) == set()
    response = search(owner, values={"title": big})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("values.title: larger than 1024 bytes of JSON")
    assert owner.client.post("/api/threads/count", {"values": {"title": big}}, format="json").status_code == 422


@pytest.mark.parametrize("values", ["alpha", ["title"], 3])
def test_values_must_be_an_object(owner, values):
    for route in ("/api/threads/search", "/api/threads/count"):
        response = owner.client.post(route, {"values": values}, format="json")
        assert response.status_code == 422 and "values" in response.json()["detail"]


def test_a_thread_this_process_may_not_read_matches_nothing_and_breaks_nothing(owner):
    delta_thread = create(owner)
    invoke(accessor("delta"), delta_thread, "delta turn")
    full_thread = create(owner)
    set_state(owner, full_thread, {"title": "delta turn"})
    assert found(owner, values={"title": "delta turn"}) == {full_thread}
    assert ThreadMeta.objects.get(pk=delta_thread).values_mirror is None


# -- extract ---------------------------------------------------------------------------


def extract(persona, paths: dict, **body) -> dict[str, dict]:
    response = search(persona, extract=paths, **body)
    assert response.status_code == 200, response.content
    return {t["thread_id"]: t for t in response.json()}


def test_extract_returns_the_values_at_each_path(owner):
    thread_id = create(owner, metadata={"team": {"name": "red", "tags": ["x", "y"]}})
    set_state(
        owner,
        thread_id,
        {"title": "t", "messages": [*HELLO, {"type": "ai", "content": "hi there", "id": "a1"}]},
    )
    paths = {
        "last": "values.messages[-1].content",
        "first_id": "values.messages[0].id",
        "title": "values.title",
        "team": "metadata.team.name",
        "tag": "metadata.team.tags[1]",
        "missing": "values.nothing.here",
        "out_of_range": "values.messages[5]",
        "index_on_dict": "metadata.team[0]",
        "pending": "interrupts",
        "conf": "config",
    }
    thread = extract(owner, paths)[thread_id]
    assert thread["extracted"] == {
        "last": "hi there",
        "first_id": "h1",
        "title": "t",
        "team": "red",
        "tag": "y",
        "missing": None,
        "out_of_range": None,
        "index_on_dict": None,
        "pending": {},
        "conf": {},
    }


def test_extract_works_whatever_select_keeps(owner):
    thread_id = create(owner)
    set_state(owner, thread_id, {"title": "kept out", "messages": HELLO})
    thread = extract(owner, {"said": "values.messages[0].content"}, select=["thread_id"])[thread_id]
    assert thread == {"thread_id": thread_id, "extracted": {"said": "hello"}}
    assert "extracted" not in search(owner).json()[0]  # only when asked


def test_extract_keys_are_data_never_sql(owner):
    thread_id = create(owner, metadata={"a": 1})
    thread = extract(owner, {"x": "metadata.a'); DROP TABLE threads_threadmeta; --"})[thread_id]
    assert thread["extracted"] == {"x": None}
    assert ThreadMeta.objects.filter(pk=thread_id).exists()


@pytest.mark.parametrize(
    ("paths", "needle"),
    [
        ({f"a{i}": "values.title" for i in range(11)}, "extract: at most 10 paths"),
        ({"1a": "values.title"}, "alias '1a' must be an identifier"),
        ({"a-b": "values.title"}, "alias 'a-b' must be an identifier"),
        ({"thread_id": "values.title"}, "alias 'thread_id' is a thread field name"),
        ({"values": "values.title"}, "is a thread field name"),
        ({"a": "state.title"}, "extract.a: must start with one of values, metadata, config, interrupts"),
        ({"a": "valuesx"}, "must start with one of"),
        ({"a": "values..title"}, "extract.a: bad step at character 6"),
        ({"a": "values."}, "bad step"),
        ({"a": "values[x]"}, "bad step"),
        ({"a": "values[1"}, "bad step"),
        ({"a": "values]"}, "must start with one of"),
        ({"a": "values.x]"}, "bad step at character 8"),
        ({"a": "values.a\u0001b"}, "bad step"),
        ({"a": ""}, "extract.a: must be a non-empty string path"),
        ({"a": 3}, "must be a non-empty string path"),
        ({"a": "values" + ".k" * 33}, "more than 32 steps"),
        ({"a": "values." + "k" * 600}, "longer than 512 characters"),
    ],
)
def test_bad_extract_is_422(owner, paths, needle):
    create(owner)
    response = search(owner, extract=paths)
    assert response.status_code == 422, response.content
    assert needle in response.json()["detail"]
