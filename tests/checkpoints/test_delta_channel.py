"""Delta threads on real savers (DeerFlow's test_delta_channel_checkpointers.py, items 1-4).

Each test runs on the pass's database saver (SQLite or PostgreSQL) and on
LangGraph's InMemorySaver, with DeltaChannel cadence 2. "Reopen" builds a new
saver on the same database, as a restarted process would.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import Overwrite

from checkpoints.backend import current_backend
from checkpoints.modes import DELTA_MARKER_KEY
from checkpoints.runtime import build_sync
from tests.checkpoints.support import (
    NOOP_SPEC,
    accessor,
    checkpoint_tuples,
    contents,
    head_metadata,
    invoke,
    new_thread_id,
    state_contents,
)

pytestmark = pytest.mark.django_db(transaction=True)


def reopened(saver, read):
    """Call ``read(saver)`` on a freshly opened saver of the same storage (same object for memory)."""
    if saver.__class__.__name__ == "InMemorySaver":
        return read(saver)
    resources = build_sync(current_backend())
    try:
        return read(resources.saver)
    finally:
        resources.close()


def test_full_to_delta_migration_replays_on_same_thread(saver):
    thread_id = new_thread_id("migrate")
    full = accessor("full", saver=saver, spec=NOOP_SPEC)
    full.graph.invoke({"messages": [HumanMessage("h1", id="h1")]}, full.config(thread_id))
    delta = accessor("delta", saver=saver, spec=NOOP_SPEC)
    assert state_contents(delta, thread_id) == ["h1"]
    # The first write after the switch must not be lost.
    delta.graph.invoke({"messages": [HumanMessage("a1", id="a1")]}, delta.config(thread_id))
    assert state_contents(delta, thread_id) == ["h1", "a1"]
    after_reopen = reopened(saver, lambda s: state_contents(accessor("delta", saver=s, spec=NOOP_SPEC), thread_id))
    assert after_reopen == ["h1", "a1"]
    assert head_metadata(saver, thread_id)[DELTA_MARKER_KEY] == "delta"


def test_materialization_is_deterministic_and_message_ids_are_stable(saver):
    thread_id = new_thread_id("ids")
    delta = accessor("delta", saver=saver, spec=NOOP_SPEC)
    delta.graph.invoke({"messages": [HumanMessage("no id")]}, delta.config(thread_id))
    delta.graph.invoke({"messages": [HumanMessage("second", id="m2")]}, delta.config(thread_id))
    delta.graph.invoke({"messages": [HumanMessage("third", id="m3")]}, delta.config(thread_id))
    first = delta.get(thread_id).values["messages"]
    second = delta.get(thread_id).values["messages"]
    third = reopened(saver, lambda s: accessor("delta", saver=s, spec=NOOP_SPEC).get(thread_id).values["messages"])
    assert first == second == third
    assert first[0].id and first[0].content == "no id"
    generated = first[0].id
    delta.graph.invoke({"messages": [RemoveMessage(id=generated)]}, delta.config(thread_id))
    assert [m.id for m in delta.get(thread_id).values["messages"]] == ["m2", "m3"]
    delta.graph.invoke({"messages": [RemoveMessage(id="m2"), RemoveMessage(id="m3")]}, delta.config(thread_id))
    assert delta.get(thread_id).values["messages"] == []


def test_delta_storage_shape_and_snapshot_cadence(saver):
    thread_id = new_thread_id("shape")
    delta = accessor("delta", saver=saver, spec=NOOP_SPEC)
    delta.graph.invoke({"messages": [HumanMessage("m1", id="m1")]}, delta.config(thread_id))
    tuples = checkpoint_tuples(saver, thread_id)
    head, ancestors = tuples[0], tuples[1:]
    assert "messages" not in head.checkpoint["channel_values"]
    assert any(w[1] == "messages" for t in ancestors for w in t.pending_writes or ())
    assert not any(isinstance(t.checkpoint["channel_values"].get("messages"), _DeltaSnapshot) for t in tuples)

    delta.graph.invoke({"messages": [HumanMessage("m2", id="m2")]}, delta.config(thread_id))
    tuples = checkpoint_tuples(saver, thread_id)
    assert any(isinstance(t.checkpoint["channel_values"].get("messages"), _DeltaSnapshot) for t in tuples)
    assert state_contents(delta, thread_id) == ["m1", "m2"]


def test_full_checkpoints_store_the_whole_list_every_step(saver):
    """The control for the shape test: full mode stores a plain list at every step."""
    thread_id = new_thread_id("fullshape")
    full = accessor("full", saver=saver, spec=NOOP_SPEC)
    invoke(full, thread_id, "m1", "m2")
    head = checkpoint_tuples(saver, thread_id)[0]
    assert contents(head.checkpoint["channel_values"]["messages"]) == ["m1", "m2"]


def test_non_delta_writers_preserve_delta_messages_and_markers(saver):
    thread_id = new_thread_id("writers")
    delta = accessor("delta", saver=saver)
    invoke(delta, thread_id, "u1")
    # A plain-channel write through the mutation graph, a fork copy and an
    # update without values: none of them touches messages.
    delta.update(thread_id, {"title": "goal set"})
    delta.update(thread_id, None, as_node="__copy__")
    delta.update(thread_id, {})

    def read(s):
        acc = accessor("delta", saver=s)
        return acc.get(thread_id), head_metadata(s, thread_id)

    snapshot, metadata = reopened(saver, read)
    assert contents(snapshot.values["messages"]) == ["u1", "echo: u1"]
    assert snapshot.values["title"] == "goal set"
    assert metadata[DELTA_MARKER_KEY] == "delta"


def test_replacing_messages_in_delta_mode_overwrites_the_list(saver):
    thread_id = new_thread_id("overwrite")
    delta = accessor("delta", saver=saver)
    invoke(delta, thread_id, "u1", "u2")
    delta.update(thread_id, {"messages": [HumanMessage("compacted", id="c")]})
    assert state_contents(delta, thread_id) == ["compacted"]
    delta.update(thread_id, {"messages": Overwrite([])})
    assert state_contents(delta, thread_id) == []
    invoke(delta, thread_id, "again")
    assert reopened(saver, lambda s: state_contents(accessor("delta", saver=s), thread_id)) == ["again", "echo: again"]
