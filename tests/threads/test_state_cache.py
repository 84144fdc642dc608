"""The encoded-state cache answers exactly what an uncached read answers (a differential test).

Every read below goes through the route twice (the second from the cache; the
counters prove it) and is compared with ``thread_state`` of the accessor's
plain ``get``, which never touches the cache. Between reads the thread changes
the ways a thread changes: a new turn, a state update, writes of a finished
task landing on the head, writes deleted from the head (as a rollback does),
a checkpoint row rewritten under its id (as snapshot thinning does), every
row deleted. Both channel modes, on the suite's backend.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import CheckpointTuple

from checkpoints.accessor import state_accessor, thread_config
from checkpoints.backend import current_backend
from checkpoints.errors import CheckpointModeMismatchError
from checkpoints.serialization import thread_state
from checkpoints.services import thread_checkpoints_delete
from checkpoints.state_cache import EncodedStateCache, read_inputs, state_cache
from tests.helpers import run_turns
from tests.threads.test_fast_reads import TOOL_CALL_UPDATE, body, plain
from tests.threads.test_state_modes import create_thread, process_in_mode

pytestmark = pytest.mark.django_db(transaction=True)

WRITES_TABLE = {"sqlite": "writes", "postgres": "checkpoint_writes"}


def uncached(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    return plain(thread_state(state_accessor("lead_agent").get(thread_id, checkpoint_id=checkpoint_id)))


def uncached_history(thread_id: str, **kwargs) -> list[dict[str, Any]]:
    return plain([thread_state(s) for s in state_accessor("lead_agent").history(thread_id, **kwargs)])


def assert_cached_history_equal(owner, thread_id: str, **page) -> list[dict[str, Any]]:
    """POST /history twice (the second all from the cache); both equal the uncached history."""
    expected = uncached_history(thread_id, limit=page.get("limit", 10), before=page.get("before"))
    first = body(owner.client.post(f"/api/threads/{thread_id}/history", page, format="json"))
    hits = state_cache.stats()["hits"]
    second = body(owner.client.post(f"/api/threads/{thread_id}/history", page, format="json"))
    assert state_cache.stats()["hits"] == hits + len(expected), "every entry of the second read is a hit"
    assert first == second == expected
    return expected


def assert_cached_read_equal(owner, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """Read twice through the route (a miss or a hit, then a hit); both equal the uncached read."""
    path = f"/api/threads/{thread_id}/state" + (f"/{checkpoint_id}" if checkpoint_id else "")
    expected = uncached(thread_id, checkpoint_id)
    first = body(owner.client.get(path))
    hits = state_cache.stats()["hits"]
    second = body(owner.client.get(path))
    assert state_cache.stats()["hits"] == hits + 1, "the second read is answered from the cache"
    assert first == second == expected
    return expected


def head_tuple(thread_id: str) -> CheckpointTuple:
    return state_accessor("lead_agent").saver.get_tuple(thread_config(thread_id))


@pytest.fixture(params=["full", "delta"])
def mode(request, settings):
    with process_in_mode(settings, request.param):
        state_cache.clear()
        yield request.param


def test_every_checkpoint_and_the_head_read_as_uncached(owner, mode):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first", "second"])
    assert owner.client.post(f"/api/threads/{thread_id}/state", TOOL_CALL_UPDATE, format="json").status_code == 200
    run_turns(thread_id, ["/image look", "/interrupt please"])
    head = assert_cached_read_equal(owner, thread_id)
    assert head["interrupts"], "the head waits on an interrupt: its pending writes are part of the key"
    ids = [
        s.config["configurable"]["checkpoint_id"] for s in state_accessor("lead_agent").history(thread_id, limit=None)
    ]
    assert len(ids) > 10
    for checkpoint_id in ids:
        assert_cached_read_equal(owner, thread_id, checkpoint_id)
    for page in ({"limit": 1}, {"limit": 4}, {"limit": 100}, {"limit": 5, "before": ids[2]}):
        assert_cached_history_equal(owner, thread_id, **page)
    by_id = body(
        owner.client.post(
            f"/api/threads/{thread_id}/state/checkpoint", {"checkpoint": {"checkpoint_id": ids[3]}}, format="json"
        )
    )
    assert by_id == uncached(thread_id, ids[3])


def test_a_thread_read_from_the_cache_equals_its_listing(owner, mode):
    """GET /threads/{id} takes values, interrupts and status from the cached head state; search reads the saver."""
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first", "/interrupt please"])

    def listed() -> dict[str, Any]:
        [found] = body(owner.client.post("/api/threads/search", {"ids": [thread_id]}, format="json"))
        return found

    first = body(owner.client.get(f"/api/threads/{thread_id}"))
    hits = state_cache.stats()["hits"]
    second = body(owner.client.get(f"/api/threads/{thread_id}"))
    assert state_cache.stats()["hits"] == hits + 1, "the second read is answered from the cache"
    expected = listed()
    assert first == second == expected
    assert expected["status"] == "interrupted" and expected["interrupts"]
    assert expected["values"]["messages"][0]["content"] == "first"
    run_turns(thread_id, ["third"])
    assert body(owner.client.get(f"/api/threads/{thread_id}")) == listed()


def test_each_change_of_the_rows_changes_the_answer(owner, mode):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first", "/interrupt please"])
    before = assert_cached_read_equal(owner, thread_id)

    # The waiting task finishes: its writes land on the head. A head read is live
    # (the writes applied, the task gone from next); a read by id is the record.
    saved = head_tuple(thread_id)
    task = state_accessor("lead_agent").get(thread_id).tasks[0]
    state_accessor("lead_agent").saver.put_writes(
        saved.config, [("messages", [AIMessage(content="finished meanwhile", id="late-1")])], task.id
    )
    live = assert_cached_read_equal(owner, thread_id)
    assert live != before and live["values"]["messages"][-1]["content"] == "finished meanwhile"
    record = assert_cached_read_equal(owner, thread_id, live["checkpoint_id"])
    assert record["values"] == before["values"] and record != live
    assert assert_cached_history_equal(owner, thread_id, limit=3)[0] == record

    # A rollback deletes writes from the head: the answer goes back with them.
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {WRITES_TABLE[current_backend().kind]} WHERE thread_id = %s AND task_id = %s"
            " AND channel = 'messages'",
            [thread_id, task.id],
        )
    assert assert_cached_read_equal(owner, thread_id) == before
    assert assert_cached_history_equal(owner, thread_id, limit=3)[0]["tasks"] == before["tasks"]

    run_turns(thread_id, ["next"])
    after_turn = assert_cached_read_equal(owner, thread_id)
    assert after_turn["checkpoint_id"] != before["checkpoint_id"]

    update = {"values": {"messages": [{"type": "human", "content": "replaced", "id": "r-1"}]}}
    assert owner.client.post(f"/api/threads/{thread_id}/state", update, format="json").status_code == 200
    updated = assert_cached_read_equal(owner, thread_id)
    assert [m["content"] for m in updated["values"]["messages"]] == ["replaced"]
    assert assert_cached_history_equal(owner, thread_id, limit=100)[0]["values"] == updated["values"]

    thread_checkpoints_delete(thread_id=thread_id)
    gone = body(owner.client.get(f"/api/threads/{thread_id}/state"))
    assert gone == uncached(thread_id) and gone["values"] == {} and gone["checkpoint_id"] is None
    assert body(owner.client.post(f"/api/threads/{thread_id}/history", {"limit": 10}, format="json")) == []


def test_a_row_rewritten_under_its_id_is_read_again(owner, mode):
    """Snapshot thinning rewrites a checkpoint row in place; the row's stored size (SQLite) or digest is in the key."""
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first", "second"])
    cached = assert_cached_read_equal(owner, thread_id)
    [inputs] = read_inputs(current_backend().kind, thread_id)
    # Rewrite the stored title (a plain channel value) under the same checkpoint id.
    saver = state_accessor("lead_agent").saver
    saved = head_tuple(thread_id)
    checkpoint = {**saved.checkpoint, "channel_values": {**saved.checkpoint["channel_values"], "title": "rewritten"}}
    versions = {"title": saver.get_next_version(checkpoint["channel_versions"].get("title"), None)}
    checkpoint["channel_versions"] = {**checkpoint["channel_versions"], **versions}
    saver.put(saved.parent_config, checkpoint, saved.metadata, versions)
    assert read_inputs(current_backend().kind, thread_id)[0].checkpoint_id == inputs.checkpoint_id
    rewritten = assert_cached_read_equal(owner, thread_id)
    assert rewritten["values"]["title"] == "rewritten" != cached["values"].get("title")


def test_the_mode_gate_holds_for_cached_states(settings, owner):
    """A delta head cached by a delta process is refused by a full process, as an uncached read is."""
    with process_in_mode(settings, "delta"):
        thread_id = create_thread(owner)
        run_turns(thread_id, ["first"])
        assert_cached_read_equal(owner, thread_id)
    with process_in_mode(settings, "full"):
        response = owner.client.get(f"/api/threads/{thread_id}/state")
        assert response.status_code == 409, response.content
        with pytest.raises(CheckpointModeMismatchError):
            state_accessor("lead_agent").encoded_state(thread_id)


def test_subgraph_reads_and_a_zero_bound_bypass_the_cache(settings, owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first"])
    state_cache.clear()
    stores = state_cache.stats()["stores"]
    assert body(owner.client.get(f"/api/threads/{thread_id}/state?subgraphs=true")) == uncached(thread_id)
    assert state_cache.stats()["stores"] == stores
    settings.DEERFLOW_CONFIG = settings.DEERFLOW_CONFIG.model_copy(deep=True)
    settings.DEERFLOW_CONFIG.database.checkpoint_state_cache.max_mb = 0
    assert body(owner.client.get(f"/api/threads/{thread_id}/state")) == uncached(thread_id)
    assert state_cache.stats()["stores"] == stores


def test_the_cache_is_bounded_in_bytes(settings):
    settings.DEERFLOW_CONFIG = settings.DEERFLOW_CONFIG.model_copy(deep=True)
    settings.DEERFLOW_CONFIG.database.checkpoint_state_cache.max_mb = 1
    cache = EncodedStateCache()
    for n in range(8):
        cache.put(("k", n), bytes(200_000))
    stats = cache.stats()
    assert stats["bytes"] <= 1 << 20 and stats["entries"] == 5 and stats["evictions"] == 3
    assert cache.get(("k", 0)) is None and cache.get(("k", 7)) == bytes(200_000)
    cache.put(("big",), bytes(300_000))
    assert cache.get(("big",)) is None and cache.stats()["oversize"] == 1


def test_a_page_larger_than_half_the_bound_stores_only_its_newest_entries(settings, owner, monkeypatch):
    """Delta mode, no snapshot: its rows store far fewer bytes than its states encode (the page goes through the cache)."""
    with process_in_mode(settings, "delta", frequency=100):
        thread_id = create_thread(owner)
        run_turns(thread_id, ["first", "second", "third", "fourth"])
        expected = uncached_history(thread_id, limit=100)
        sizes = [len(json.dumps(entry)) for entry in expected]
        bound = 2 * sum(sizes[:3])
        monkeypatch.setattr(EncodedStateCache, "max_bytes", staticmethod(lambda: bound))
        state_cache.clear()
        stores = state_cache.stats()["stores"]
        path = f"/api/threads/{thread_id}/history"
        assert body(owner.client.post(path, {"limit": 100}, format="json")) == expected
        stored = state_cache.stats()["stores"] - stores
        assert 3 <= stored < len(expected)
        hits = state_cache.stats()["hits"]
        assert body(owner.client.post(path, {"limit": 100}, format="json")) == expected
        assert state_cache.stats()["hits"] - hits == stored


def test_info_and_the_console_show_the_cache(owner, admin_client):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first"])
    state_cache.clear()
    before = state_cache.stats()
    assert_cached_read_equal(owner, thread_id)
    response = owner.client.get("/api/info")
    assert response.status_code == 200, response.content
    shown = response.json()["checkpoints"]["state_cache"]
    assert shown["enabled"] is True and shown["max_mb"] == 64
    assert shown["entries"] == 1 and shown["bytes"] > 0
    assert shown["counters"]["hits"] == before["hits"] + 1 and shown["counters"]["stores"] == before["stores"] + 1
    page = admin_client.get("/admin/checkpoints/settings/").content.decode()
    assert '<td id="state-cache">1 states,' in page
