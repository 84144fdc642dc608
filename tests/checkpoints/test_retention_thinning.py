"""Snapshot thinning: fewer delta snapshots, every retained checkpoint materializes identically.

A delta thread at cadence 2 stores a full ``_DeltaSnapshot`` every turn. Thinning
keeps the nearest snapshot of each anchor (head, protected checkpoints,
retained leaves) and drops the others only when a replay from the snapshot
before reproduces them exactly. The oracle is the state of EVERY retained
checkpoint, read through the accessor before and after, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from checkpoints.accessor import thread_config
from checkpoints.retention import RetentionPolicy, replay_channels, replayed_value, thread_checkpoints_prune
from checkpoints.storage import thread_storage_get
from tests.checkpoints.test_retention import (
    assert_resumable,
    ids,
    make_accessor,
    materialize,
    new_thread,
    settled_ends,
    turn,
    with_sibling_branch,
)

pytestmark = pytest.mark.django_db(transaction=True)

THIN = RetentionPolicy(thin_snapshots=True)
KEEP_LATEST = RetentionPolicy(prune_siblings=True, thin_snapshots=True)


@pytest.fixture
def delta():
    return make_accessor("delta", 2)


def snapshot_holders(acc, thread_id: str) -> set[str]:
    """Checkpoints whose own row stores a messages value (through the saver API)."""
    holders = set()
    for item in acc.saver.list(thread_config(thread_id)):
        if "messages" in item.checkpoint["channel_values"]:
            holders.add(item.config["configurable"]["checkpoint_id"])
    return holders


def snapshot_versions(acc, thread_id: str, among: set[str] | None = None) -> set[str]:
    """The versions of the thread's messages snapshots (each snapshot has its own), via the saver API."""
    versions = set()
    for item in acc.saver.list(thread_config(thread_id)):
        if among is not None and item.config["configurable"]["checkpoint_id"] not in among:
            continue
        if isinstance(item.checkpoint["channel_values"].get("messages"), _DeltaSnapshot):
            versions.add(item.checkpoint["channel_versions"]["messages"])
    return versions


def stored_snapshot(acc, thread_id: str, checkpoint_id: str):
    return acc.saver.get_tuple(thread_config(thread_id, checkpoint_id)).checkpoint["channel_values"]["messages"].value


def thin_and_compare(acc, thread_id: str, policy: RetentionPolicy):
    """Apply ``policy`` (after an identical dry run); assert every retained checkpoint reads the same."""
    everything = ids(acc, thread_id)
    before = materialize(acc, thread_id, everything)
    storage = thread_storage_get(thread_id=thread_id)
    assert storage["snapshot_count"] == len(snapshot_versions(acc, thread_id))
    dry = thread_checkpoints_prune(thread_id=thread_id, policy=policy, dry_run=True)
    retained = [cid for cid in everything if cid not in {d["checkpoint_id"] for d in dry.deleted}]
    retained_snapshots = snapshot_versions(acc, thread_id, among=set(retained))
    report = thread_checkpoints_prune(thread_id=thread_id, policy=policy)
    assert report.thinned == dry.thinned and report.deleted == dry.deleted
    assert report.bytes_saved == dry.bytes_saved
    assert ids(acc, thread_id) == retained
    assert materialize(acc, thread_id, retained) == {cid: before[cid] for cid in retained}
    after = thread_storage_get(thread_id=thread_id)
    assert after["snapshot_count"] == len(retained_snapshots) - len(report.thinned)
    assert after["snapshot_count"] == len(snapshot_versions(acc, thread_id))
    assert after["orphans"] == {"writes": 0, "blobs": 0, "parents": 0}
    again = thread_checkpoints_prune(thread_id=thread_id, policy=policy)
    assert again.thinned == [] and again.deleted == [] and not again.changed
    return report, storage, after


def test_thinning_keeps_every_retained_checkpoint_identical(delta):
    thread_id = new_thread()
    for index in range(8):
        turn(delta, thread_id, f"turn {index} " + "lorem ipsum " * 40)
    report, storage, after = thin_and_compare(delta, thread_id, THIN)
    # Cadence 2 and two updates per turn: a snapshot every turn; only the head's stays.
    assert storage["snapshot_count"] == 8 and after["snapshot_count"] == 1
    assert len(report.thinned) == 7
    assert [k["reason"] for k in report.kept_snapshots] == ["nearest snapshot of the head of namespace ''"]
    assert snapshot_holders(delta, thread_id) == {ids(delta, thread_id)[0]}
    saved = storage["total"]["bytes"] - after["total"]["bytes"]
    assert saved > 0 and saved >= sum(report.bytes_saved.values()) * 0.9
    assert after["channels"]["messages"]["value_bytes"] < storage["channels"]["messages"]["value_bytes"] / 4
    assert_resumable(delta, thread_id, explicit_id=settled_ends(delta, thread_id)[2])


def test_keep_latest_prunes_a_branch_and_thins_around_every_anchor(delta):
    thread_id = new_thread()
    branch, ends = with_sibling_branch(delta, thread_id, turns=5)
    protected = ends[2]
    policy = RetentionPolicy(prune_siblings=True, thin_snapshots=True, protect_ids=frozenset({protected}))
    report, storage, after = thin_and_compare(delta, thread_id, policy)
    assert {d["checkpoint_id"] for d in report.deleted} == set(branch)
    reasons = {k["checkpoint_id"]: k["reason"] for k in report.kept_snapshots}
    assert reasons[protected] == f"nearest snapshot of protected checkpoint {protected}"
    assert protected in snapshot_holders(delta, thread_id)
    assert report.thinned and after["snapshot_count"] < storage["snapshot_count"]
    assert_resumable(delta, thread_id, explicit_id=protected)


def test_thinning_keeps_a_fork_snapshot_that_no_replay_can_rebuild(delta):
    thread_id = new_thread()
    for index in range(3):
        turn(delta, thread_id, f"turn {index}")
    older = settled_ends(delta, thread_id)[0]
    rewritten = [HumanMessage("rewritten question", id="h-rewritten"), AIMessage("rewritten answer", id="a-rewritten")]
    fork = delta.update(thread_id, {"messages": rewritten}, checkpoint_id=older)["configurable"]["checkpoint_id"]
    for index in range(3):
        turn(delta, thread_id, f"after the fork {index}")
    # The fork's update is stored only in its snapshot: a naive thinning would lose it.
    spec = replay_channels("lead_agent")["messages"]
    assert replayed_value(delta.saver, thread_id, ("", fork), "messages", spec) != stored_snapshot(
        delta, thread_id, fork
    )
    report, _, _ = thin_and_compare(delta, thread_id, THIN)
    reasons = {k["checkpoint_id"]: k["reason"] for k in report.kept_snapshots}
    assert reasons[fork].startswith("a replay does not reproduce it")
    assert fork in snapshot_holders(delta, thread_id)
    assert report.thinned
    head = delta.get(thread_id).values["messages"]
    assert [m.id for m in head[:2]] == ["h-rewritten", "a-rewritten"]


def test_thinning_keeps_the_snapshot_of_a_branch_below_foreign_writes(delta):
    thread_id = new_thread()
    for index in range(3):
        turn(delta, thread_id, f"turn {index}")
    line = delta.history(thread_id, limit=None)
    second_input = next(s for s in reversed(line) if s.metadata.get("source") == "input" and s.metadata["step"] > 0)
    input_id = second_input.config["configurable"]["checkpoint_id"]
    before = set(ids(delta, thread_id))
    # The input checkpoint owns the old turn's writes; the new branch must never replay them.
    turn(delta, thread_id, "a different second question", checkpoint_id=input_id)
    for index in range(3):
        turn(delta, thread_id, f"branch turn {index}")
    report, _, _ = thin_and_compare(delta, thread_id, THIN)
    branch = [cid for cid in ids(delta, thread_id) if cid not in before]
    unreproducible = [k for k in report.kept_snapshots if k["reason"].startswith("a replay does not reproduce it")]
    assert unreproducible and {k["checkpoint_id"] for k in unreproducible} <= set(branch)
    contents = [m.content for m in delta.get(thread_id).values["messages"]]
    assert "turn 1" not in contents and "a different second question" in contents


def test_tuple_inputs_get_ids_at_write_time_and_thin_like_any_other(delta):
    """("user", text) inputs are stamped with ids before they are saved (checkpoints/reducer.py).

    Without that, each delta replay made new ids, so no snapshot was reproducible
    and thinning had to keep them all.
    """
    thread_id = new_thread()
    for index in range(4):
        delta.graph.invoke({"messages": [("user", f"tuple turn {index}")]}, delta.config(thread_id))
    report, storage, after = thin_and_compare(delta, thread_id, THIN)
    assert report.thinned and after["snapshot_count"] == 1


def test_tuple_input_message_ids_are_stable_across_reads(delta):
    thread_id = new_thread()
    delta.graph.invoke({"messages": [("user", "hello")]}, delta.config(thread_id))
    for checkpoint_id in ids(delta, thread_id):
        first = [m.id for m in delta.get(thread_id, checkpoint_id=checkpoint_id).values.get("messages", [])]
        second = [m.id for m in delta.get(thread_id, checkpoint_id=checkpoint_id).values.get("messages", [])]
        assert first == second
