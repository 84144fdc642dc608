"""A thread's whole lifecycle reads the same in full and delta mode (DeerFlow's test_threads_checkpoint_mode.py).

The demo agent is the production thread schema here; every observation a
client can make (state, history, branch, compaction, next turn) must be equal
in both modes, while the storage shape differs as designed.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from tests.checkpoints.support import accessor, checkpoint_tuples, invoke, new_thread_id

pytestmark = pytest.mark.django_db(transaction=True)


def observe_messages(messages: list[Any]) -> list[tuple[str, Any]]:
    # Ids of human messages are uuids generated per run, so they differ between runs.
    return [(m.type, m.content) for m in messages]


def observe(snapshot) -> dict[str, Any]:
    values = dict(snapshot.values)
    return {
        "messages": observe_messages(values.pop("messages", [])),
        "values": values,
        "next": snapshot.next,
        "source": (snapshot.metadata or {}).get("source"),
        "step": (snapshot.metadata or {}).get("step"),
    }


def lifecycle(mode: str, saver) -> list[Any]:
    """Run the DeerFlow lifecycle on a new thread and return what a client would see."""
    acc = accessor(mode, saver=saver)
    thread_id = new_thread_id(f"life-{mode}")
    seen: list[Any] = []
    invoke(acc, thread_id, "first", "second", "third")
    seen.append(observe(acc.get(thread_id)))
    seen.append([observe(s) for s in acc.history(thread_id, limit=2)])
    oldest = acc.history(thread_id, limit=None)[-1]
    branch = acc.update(thread_id, {"title": "branched"}, checkpoint_id=oldest.config["configurable"]["checkpoint_id"])
    seen.append(observe(acc.get(thread_id, checkpoint_id=branch["configurable"]["checkpoint_id"])))
    acc.update(thread_id, {"messages": [HumanMessage("summary of the conversation", id="summary")]})
    seen.append(observe(acc.get(thread_id)))
    invoke(acc, thread_id, "fourth")
    seen.append(observe(acc.get(thread_id)))
    seen.append([observe(s) for s in acc.history(thread_id, limit=None)])
    return seen


def test_thread_lifecycle_parity(saver):
    full, delta = lifecycle("full", saver), lifecycle("delta", saver)
    assert full == delta
    # Not vacuous: the final state holds the compaction and the next turn.
    assert full[4]["messages"] == [
        ("human", "summary of the conversation"),
        ("human", "fourth"),
        ("ai", "echo: fourth"),
    ]
    assert full[2]["values"] == {"title": "branched"} and full[2]["messages"] == []


def stored_message_blobs(saver, thread_id: str) -> list[Any]:
    """Return the checkpoints' stored ``messages`` values (full lists or snapshots)."""
    return [
        t.checkpoint["channel_values"]["messages"]
        for t in checkpoint_tuples(saver, thread_id)
        if "messages" in t.checkpoint["channel_values"]
    ]


def test_delta_thread_avoids_per_step_full_message_blobs(db_saver):
    full_thread, delta_thread = new_thread_id("blobs-full"), new_thread_id("blobs-delta")
    invoke(accessor("full", 10, saver=db_saver), full_thread, "1", "2", "3", "4")
    invoke(accessor("delta", 10, saver=db_saver), delta_thread, "1", "2", "3", "4")
    assert len(stored_message_blobs(db_saver, full_thread)) >= 4
    assert len(stored_message_blobs(db_saver, delta_thread)) <= 1


def test_delta_snapshot_frequency_controls_snapshot_cadence(db_saver):
    turns = ["1", "2", "3", "4", "5", "6"]
    every_2, every_10 = new_thread_id("sf2"), new_thread_id("sf10")
    invoke(accessor("delta", 2, saver=db_saver), every_2, *turns)
    invoke(accessor("delta", 10, saver=db_saver), every_10, *turns)
    snapshots_2 = [b for b in stored_message_blobs(db_saver, every_2) if isinstance(b, _DeltaSnapshot)]
    snapshots_10 = [b for b in stored_message_blobs(db_saver, every_10) if isinstance(b, _DeltaSnapshot)]
    assert len(snapshots_2) >= 4
    assert len(snapshots_2) > len(snapshots_10)
    state_2 = accessor("delta", 2, saver=db_saver).get(every_2).values["messages"]
    state_10 = accessor("delta", 10, saver=db_saver).get(every_10).values["messages"]
    assert observe_messages(state_2) == observe_messages(state_10)
    assert len(state_2) == 12
