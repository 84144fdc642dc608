"""Thread routes and channel modes (DeerFlow's test_gateway_checkpoint_mode.py, and further).

- A full-mode process answers 409 on every thread route that touches a delta
  thread's checkpoints, with DeerFlow's text and the thread id; never 500.
- A process asked to change its mode answers 503 and writes nothing.
- In a delta-mode process the wire responses equal full mode's, and full
  threads read and continue there (the migration path).

The suite's process is frozen ``full``; ``process_in_mode`` switches it for a
block and restores exactly what was frozen.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any

import pytest

from checkpoints import modes
from checkpoints.modes import DELTA_COUNTERS_KEY, DELTA_MARKER_KEY
from checkpoints.runtime import close_sync_resources
from tests.checkpoints.conftest import configure
from tests.checkpoints.support import accessor, checkpoint_tuples, head_metadata, invoke
from tests.helpers import raw_checkpoint_count, run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

MISMATCH = "Thread requires delta mode; materialize and convert its checkpoints before using full mode."


def gate_refusal(thread_id: str) -> dict:
    """The gate's 409 body: DeerFlow's sentence naming the thread, then the command that converts it."""
    command = f"Run: manage.py convert_checkpoints --to full --thread {thread_id}"
    return {"detail": f"Thread {thread_id}: {MISMATCH} {command}"}


RECONFIGURED = "checkpoint_channel_mode is restart-required and cannot change in a running process"


@contextmanager
def process_in_mode(settings, mode: str, frequency: int = 2):
    """Run a block as a process frozen in ``mode``; restore the suite's freeze afterwards."""
    saved = modes.frozen_settings()
    original = settings.DEERFLOW_CONFIG
    modes._reset_for_tests()
    close_sync_resources()
    configure(settings, checkpoint_channel_mode=mode, snapshot_frequency=frequency)
    try:
        assert modes.process_mode() == (mode, frequency)
        yield
    finally:
        settings.DEERFLOW_CONFIG = original
        modes._reset_for_tests()
        close_sync_resources()
        if saved[0] is not None:
            modes.freeze_channel_mode(saved[0])
        if saved[1] is not None:
            modes.freeze_snapshot_frequency(saved[1])


def create_thread(owner) -> str:
    response = owner.client.post("/api/threads", {}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


@pytest.fixture
def delta_thread(owner) -> str:
    """A thread of the owner written by a real delta-mode graph on the process's database."""
    thread_id = create_thread(owner)
    invoke(accessor("delta"), thread_id, "one", "two")
    assert head_metadata(accessor("full").saver, thread_id)[DELTA_MARKER_KEY] == "delta"
    return thread_id


def checkpoint_routes(thread_id: str, checkpoint_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every thread route that reads or writes a checkpoint."""
    base = f"/api/threads/{thread_id}"
    return [
        ("get", base, None),
        ("get", f"{base}/state", None),
        ("get", f"{base}/state/{checkpoint_id}", None),
        ("post", f"{base}/state/checkpoint", {"checkpoint": {"checkpoint_id": checkpoint_id}}),
        ("post", f"{base}/history", {"limit": 5}),
        ("get", f"{base}/history?limit=5", None),
        ("post", f"{base}/state", {"values": {"title": "x"}}),
        ("post", f"{base}/state", {"values": {"title": "x"}, "checkpoint_id": checkpoint_id}),
        ("post", f"{base}/state", {"values": None, "as_node": "__copy__"}),
    ]


def call(owner, method: str, path: str, body: dict[str, Any] | None):
    if method == "get":
        return owner.client.get(path)
    return owner.client.post(path, body or {}, format="json")


def test_full_mode_rejects_a_delta_thread_with_409_on_every_checkpoint_route(owner, delta_thread):
    older = checkpoint_tuples(accessor("full").saver, delta_thread)[2].config["configurable"]["checkpoint_id"]
    before = raw_checkpoint_count(delta_thread)
    for method, path, body in checkpoint_routes(delta_thread, older):
        response = call(owner, method, path, body)
        assert response.status_code == 409, (method, path, response.content)
        assert response.json() == gate_refusal(delta_thread), (method, path)
    # Nothing partial was written by the refused updates.
    assert raw_checkpoint_count(delta_thread) == before
    assert ThreadMeta.objects.get(pk=delta_thread).display_name == ""


def test_search_lists_a_delta_thread_with_the_gate_message_instead_of_failing(owner, delta_thread):
    response = owner.client.post("/api/threads/search", {}, format="json")
    assert response.status_code == 200
    [listed] = [t for t in response.json() if t["thread_id"] == delta_thread]
    assert listed["error"].startswith(MISMATCH)
    assert listed["values"] == {}
    bare = owner.client.post("/api/threads/search", {"select": ["thread_id", "metadata"]}, format="json")
    assert bare.status_code == 200 and delta_thread in [t["thread_id"] for t in bare.json()]
    count = owner.client.post("/api/threads/count", {}, format="json")
    assert count.status_code == 200 and count.json() >= 1


def test_patch_and_copy_of_a_delta_thread_are_409_and_write_nothing(owner, delta_thread):
    threads_before = ThreadMeta.objects.count()
    patch = owner.client.patch(f"/api/threads/{delta_thread}", {"metadata": {"k": 1}}, format="json")
    copy = owner.client.post(f"/api/threads/{delta_thread}/copy", {}, format="json")
    for response in (patch, copy):
        assert response.status_code == 409, response.content
        assert response.json() == gate_refusal(delta_thread)
    assert ThreadMeta.objects.get(pk=delta_thread).metadata.get("k") is None
    assert ThreadMeta.objects.count() == threads_before


def test_full_mode_may_delete_a_delta_thread(owner, delta_thread):
    """Deleting reads no state, so nothing partial can be used: it is allowed."""
    assert owner.client.delete(f"/api/threads/{delta_thread}").status_code == 204
    assert raw_checkpoint_count(delta_thread) == 0


def test_another_users_delta_thread_is_still_404(other, delta_thread):
    response = other.client.get(f"/api/threads/{delta_thread}/state")
    assert response.status_code == 404


def test_reconfiguration_answers_503_and_writes_nothing(settings, owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one"])
    modes.process_mode()  # the suite's process is frozen full before the config changes
    saver = accessor("full").saver
    before = checkpoint_tuples(saver, thread_id)
    head = before[0].config["configurable"]["checkpoint_id"]
    configure(settings, checkpoint_channel_mode="delta")
    for method, path, body in checkpoint_routes(thread_id, head):
        response = call(owner, method, path, body)
        assert response.status_code == 503, (method, path, response.content)
        assert response.json() == {"detail": RECONFIGURED}
    assert owner.client.get("/api/info").status_code == 503
    after = checkpoint_tuples(saver, thread_id)
    assert after == before
    assert all(DELTA_MARKER_KEY not in t.metadata for t in after)
    assert modes.frozen_settings()[0] == "full"


def test_cadence_reconfiguration_answers_503(settings, owner):
    thread_id = create_thread(owner)
    modes.process_mode()
    configure(settings, snapshot_frequency=modes.frozen_settings()[1] + 1)
    response = owner.client.get(f"/api/threads/{thread_id}/state")
    assert response.status_code == 503
    assert "snapshot_frequency is restart-required" in response.json()["detail"]


def test_thread_whose_graph_is_gone_fails_closed(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one"])
    before = raw_checkpoint_count(thread_id)
    ThreadMeta.objects.filter(pk=thread_id).update(assistant_id="retired_graph")
    update = owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "x"}}, format="json")
    assert update.status_code == 404
    assert update.json() == {"detail": "Assistant retired_graph not found"}
    assert owner.client.get(f"/api/threads/{thread_id}/state").status_code == 404
    assert raw_checkpoint_count(thread_id) == before


# -- a delta-mode process --------------------------------------------------------------

UUIDISH = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$|^lc_run--")
VOLATILE_KEYS = {
    "thread_id",
    "checkpoint_id",
    "parent_checkpoint_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "id",
    "run_id",
}


def normalized(value: Any) -> Any:
    """Drop ids, timestamps and mode markers: what must not differ between modes is what is left."""
    if isinstance(value, dict):
        return {
            k: normalized(v)
            for k, v in value.items()
            if k not in VOLATILE_KEYS and k not in (DELTA_MARKER_KEY, DELTA_COUNTERS_KEY, "parents")
        }
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, str) and UUIDISH.match(value):
        return "<id>"
    return value


def wire(owner, thread_id: str) -> dict[str, Any]:
    responses = {
        "thread": owner.client.get(f"/api/threads/{thread_id}"),
        "state": owner.client.get(f"/api/threads/{thread_id}/state"),
        "history": owner.client.post(f"/api/threads/{thread_id}/history", {"limit": 100}, format="json"),
        "search": owner.client.post("/api/threads/search", {"ids": [thread_id]}, format="json"),
    }
    for name, response in responses.items():
        assert response.status_code == 200, (name, response.content)
    return {name: normalized(response.json()) for name, response in responses.items()}


TURNS = ["first", "second", "third"]


def test_thread_state_endpoints_are_mode_invariant(settings, owner):
    full_thread = create_thread(owner)
    run_turns(full_thread, TURNS)
    full = wire(owner, full_thread)
    with process_in_mode(settings, "delta"):
        delta_thread = create_thread(owner)
        run_turns(delta_thread, TURNS)
        delta = wire(owner, delta_thread)
        assert head_metadata(accessor("delta").saver, delta_thread)[DELTA_MARKER_KEY] == "delta"
    assert delta == full
    messages = [m["content"] for m in full["state"]["values"]["messages"]]
    assert messages == ["first", "echo: first", "second", "echo: second", "third", "echo: third"]
    assert len(full["history"]) == 9
    # Search reads the materialized messages in both modes (DeerFlow's context-usage reader).
    assert [m["content"] for m in delta["search"][0]["values"]["messages"]] == messages


def test_delta_process_reads_full_threads_and_continues_them(settings, owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["before switch"])
    full_state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    with process_in_mode(settings, "delta"):
        state = owner.client.get(f"/api/threads/{thread_id}/state").json()
        assert state["values"] == full_state["values"]
        run_turns(thread_id, ["after switch"])
        update = owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "delta"}}, format="json")
        assert update.status_code == 200, update.content
        state = owner.client.get(f"/api/threads/{thread_id}/state").json()
        assert [m["content"] for m in state["values"]["messages"]] == [
            "before switch",
            "echo: before switch",
            "after switch",
            "echo: after switch",
        ]
        assert state["values"]["title"] == "delta"
        assert state["metadata"][DELTA_MARKER_KEY] == "delta"
        history = owner.client.post(f"/api/threads/{thread_id}/history", {"limit": 100}, format="json").json()
        # 3 full checkpoints, 3 delta ones from the new turn, 1 from the update.
        assert len(history) == 7
        assert [m["content"] for m in history[4]["values"]["messages"]] == ["before switch", "echo: before switch"]
    # Once continued in delta mode, the thread is delta: the full process refuses it.
    response = owner.client.get(f"/api/threads/{thread_id}/state")
    assert response.status_code == 409
    assert response.json() == gate_refusal(thread_id)
