"""Retention (DeerFlow reference §3.8, §6.9, §6.10): delete only proven-safe shapes, never break lineage.

Every scenario runs on the pass's real database (SQLite, then PostgreSQL) with
the real demo graph. After a pass, every protected checkpoint must stay
resumable: the head takes a new turn, an explicit checkpoint id is readable
and a turn runs from it, the lineage walk from the head still finds the
checkpoint before an older turn, and no row points at a deleted one.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime

import pytest
from django.db import transaction
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base.id import uuid6
from langgraph.types import Command

from checkpoints.accessor import StateAccessor, thread_config
from checkpoints.errors import CheckpointNotFoundError
from checkpoints.graphs import resolve_graph
from checkpoints.lineage import checkpoint_id_of, find_checkpoint_before_message
from checkpoints.retention import (
    CheckpointProtectedError,
    RetentionConflictError,
    RetentionPolicy,
    RetentionRun,
    thread_checkpoints_prune,
)
from checkpoints.runtime import sync_resources
from checkpoints.storage import thread_storage_get

pytestmark = pytest.mark.django_db(transaction=True)

SIBLINGS = RetentionPolicy(prune_siblings=True)


def make_accessor(mode: str, frequency: int = 2) -> StateAccessor:
    resources = sync_resources()
    return StateAccessor(resolve_graph("lead_agent"), mode, frequency, saver=resources.saver, store=resources.store)


@pytest.fixture(params=["full", "delta"])
def acc(request) -> StateAccessor:
    return make_accessor(request.param)


def new_thread() -> str:
    return f"ret-{uuid.uuid4().hex[:12]}"


def turn(acc: StateAccessor, thread_id: str, text: str, checkpoint_id: str | None = None):
    # Message objects, not ("user", text) tuples: see test_tuple_inputs_are_never_thinned.
    return acc.graph.invoke({"messages": [HumanMessage(text)]}, acc.config(thread_id, checkpoint_id))


def ids(acc: StateAccessor, thread_id: str) -> list[str]:
    """Every checkpoint id of the thread, newest first (saver API)."""
    return [t.config["configurable"]["checkpoint_id"] for t in acc.saver.list(thread_config(thread_id))]


def main_line(acc: StateAccessor, thread_id: str) -> list:
    """The head's lineage as state snapshots, newest first."""
    return acc.history(thread_id, limit=None)


def settled_ends(acc: StateAccessor, thread_id: str) -> list[str]:
    """Ids of the checkpoints that end a turn (settled loop checkpoints), oldest first."""
    line = main_line(acc, thread_id)
    return [checkpoint_id_of(s) for s in reversed(line) if s.metadata.get("source") == "loop" and not s.next]


def shape(values: dict) -> dict:
    """Materialized values, messages compared by type, content and id."""
    out = {k: v for k, v in values.items() if k != "messages"}
    out["messages"] = [(m.type, m.content, m.id) for m in values.get("messages", [])]
    return out


def materialize(acc: StateAccessor, thread_id: str, checkpoint_ids: list[str]) -> dict[str, dict]:
    return {cid: shape(acc.get(thread_id, checkpoint_id=cid).values) for cid in checkpoint_ids}


def orphans(thread_id: str) -> dict[str, int]:
    return thread_storage_get(thread_id=thread_id)["orphans"]


def human_ids(snapshot) -> list[str]:
    return [m.id for m in snapshot.values["messages"] if m.type == "human"]


def assert_resumable(acc: StateAccessor, thread_id: str, explicit_id: str) -> None:
    """The contract after any pass: lineage walk, explicit resume, head resume, zero orphans."""
    assert orphans(thread_id) == {"writes": 0, "blobs": 0, "parents": 0}
    head = acc.get(thread_id)
    older_human = human_ids(head)[1]
    base = find_checkpoint_before_message(acc, thread_id, head, older_human)
    assert older_human not in [m.id for m in base.values.get("messages", [])]
    explicit = acc.get(thread_id, checkpoint_id=explicit_id)
    prefix = [(m.type, m.content) for m in explicit.values["messages"]]
    resumed = turn(acc, thread_id, "resumed from an explicit id", checkpoint_id=explicit_id)
    assert [(m.type, m.content) for m in resumed["messages"]][: len(prefix)] == prefix
    assert resumed["messages"][-1].content == "echo: resumed from an explicit id"
    latest = turn(acc, thread_id, "after retention")
    assert latest["messages"][-1].content == "echo: after retention"


def with_sibling_branch(acc: StateAccessor, thread_id: str, turns: int = 3) -> tuple[list[str], list[str]]:
    """Turns on the main line plus one abandoned turn forked from the end of the first.

    Returns (the branch's checkpoint ids, the main line's turn ends). The main
    line then takes one more turn from its old head, so the branch is off-chain.
    """
    for index in range(turns):
        turn(acc, thread_id, f"turn {index}")
    ends = settled_ends(acc, thread_id)
    before = set(ids(acc, thread_id))
    turn(acc, thread_id, "abandoned fork", checkpoint_id=ends[0])
    branch = [cid for cid in ids(acc, thread_id) if cid not in before]
    turn(acc, thread_id, "main line continues", checkpoint_id=ends[-1])
    return branch, settled_ends(acc, thread_id)


def metadata_only_child(acc: StateAccessor, thread_id: str, parent_id: str) -> str:
    """Append a clone of ``parent_id`` with new metadata only (DeerFlow's run-duration writer)."""
    parent = acc.saver.get_tuple(thread_config(thread_id, parent_id))
    checkpoint = copy.deepcopy(parent.checkpoint)
    step = parent.metadata.get("step", 0) + 1
    checkpoint["id"] = str(uuid6(clock_seq=step))
    checkpoint["ts"] = datetime.now(UTC).isoformat()
    metadata = {**parent.metadata, "source": "update", "step": step, "run_durations": {"r1": 2}}
    return acc.saver.put(thread_config(thread_id, parent_id), checkpoint, metadata, {})["configurable"]["checkpoint_id"]


# -- deletion shapes -------------------------------------------------------------


def test_linear_thread_prunes_nothing_and_protects_the_whole_lineage(acc):
    thread_id = new_thread()
    for index in range(3):
        turn(acc, thread_id, f"turn {index}")
    everything = ids(acc, thread_id)
    policy = RetentionPolicy(prune_siblings=True, thin_snapshots=False)
    dry = thread_checkpoints_prune(thread_id=thread_id, policy=policy, dry_run=True)
    applied = thread_checkpoints_prune(thread_id=thread_id, policy=policy)
    for report in (dry, applied):
        assert report.deleted == [] and report.kept == []
        assert report.heads == {"": everything[0]}
        reasons = {p["checkpoint_id"]: p["reasons"] for p in report.protected}
        assert set(reasons) == set(everything)
        assert reasons[everything[0]][0] == "head of namespace ''"
        assert all("lineage of the head of namespace ''" in reasons[cid] for cid in everything[1:])
    assert ids(acc, thread_id) == everything


def test_leaf_sibling_branch_goes_entirely_with_its_writes(acc):
    thread_id = new_thread()
    branch, ends = with_sibling_branch(acc, thread_id)
    survivors = [cid for cid in ids(acc, thread_id) if cid not in branch]
    before = materialize(acc, thread_id, survivors)
    storage = thread_storage_get(thread_id=thread_id)

    dry = thread_checkpoints_prune(thread_id=thread_id, policy=SIBLINGS, dry_run=True)
    assert {d["checkpoint_id"] for d in dry.deleted} == set(branch)
    assert {d["shape"] for d in dry.deleted} == {"leaf_sibling"}
    assert set(ids(acc, thread_id)) == set(survivors + branch)
    assert thread_checkpoints_prune(thread_id=thread_id, policy=SIBLINGS, dry_run=True).as_dict() == dry.as_dict()

    applied = thread_checkpoints_prune(thread_id=thread_id, policy=SIBLINGS)
    assert {d["checkpoint_id"] for d in applied.deleted} == set(branch)
    assert applied.rows_deleted == dry.rows_deleted and applied.bytes_saved == dry.bytes_saved
    # The branch owned writes (its input, its answer); they go with it.
    assert applied.rows_deleted["writes"] >= 2
    after = thread_storage_get(thread_id=thread_id)
    assert after["checkpoint_count"] == storage["checkpoint_count"] - len(branch)
    assert after["tables"]["writes"]["rows"] == storage["tables"]["writes"]["rows"] - applied.rows_deleted["writes"]
    assert after["total"]["bytes"] < storage["total"]["bytes"]
    assert set(ids(acc, thread_id)) == set(survivors)
    assert materialize(acc, thread_id, survivors) == before

    again = thread_checkpoints_prune(thread_id=thread_id, policy=SIBLINGS)
    assert again.deleted == [] and again.rows_deleted == {"checkpoints": 0, "writes": 0, "blobs": 0}
    assert_resumable(acc, thread_id, explicit_id=ends[1])


def test_sibling_branches_stay_unless_asked(acc):
    thread_id = new_thread()
    branch, _ = with_sibling_branch(acc, thread_id)
    report = thread_checkpoints_prune(thread_id=thread_id)
    assert report.deleted == []
    kept = {k["checkpoint_id"]: k["reason"] for k in report.kept}
    assert kept[branch[0]] == "off-chain leaf (sibling pruning is off)"
    assert set(branch) <= set(ids(acc, thread_id))


def test_metadata_only_leaf_is_deleted_by_default_and_its_shared_blobs_survive(acc):
    thread_id = new_thread()
    for index in range(2):
        turn(acc, thread_id, f"turn {index}")
    head = ids(acc, thread_id)[0]
    leaf = metadata_only_child(acc, thread_id, head)
    assert ids(acc, thread_id)[0] == leaf
    # A trailing metadata-only checkpoint is the head: a client was just given its id.
    assert thread_checkpoints_prune(thread_id=thread_id).deleted == []

    turn(acc, thread_id, "next run starts from the settled head", checkpoint_id=head)
    survivors = [cid for cid in ids(acc, thread_id) if cid != leaf]
    before = materialize(acc, thread_id, survivors)
    report = thread_checkpoints_prune(thread_id=thread_id)
    assert report.deleted == [{"checkpoint_id": leaf, "checkpoint_ns": "", "shape": "metadata_only"}]
    # Its blobs are its parent's: collected over the survivors, none goes.
    assert report.rows_deleted == {"checkpoints": 1, "writes": 0, "blobs": 0}
    assert materialize(acc, thread_id, survivors) == before
    assert thread_checkpoints_prune(thread_id=thread_id).deleted == []
    assert_resumable(acc, thread_id, explicit_id=head)


def test_leaf_with_pending_writes_is_kept_and_still_resumable(acc):
    thread_id = new_thread()
    for index in range(3):
        turn(acc, thread_id, f"turn {index}")
    ends = settled_ends(acc, thread_id)
    before = set(ids(acc, thread_id))
    turn(acc, thread_id, "/interrupt please", checkpoint_id=ends[0])
    interrupted = [cid for cid in ids(acc, thread_id) if cid not in before]
    turn(acc, thread_id, "main line continues", checkpoint_id=ends[-1])

    report = thread_checkpoints_prune(thread_id=thread_id, policy=SIBLINGS)
    assert report.deleted == []
    reasons = {p["checkpoint_id"]: p["reasons"] for p in report.protected}
    leaf = interrupted[0]
    assert reasons[leaf] == ["owns pending writes (unconsumed state, e.g. an interrupt)"]
    assert all(f"lineage of leaf {leaf}" in reasons[cid] for cid in interrupted[1:])
    resumed = acc.graph.invoke(Command(resume="yes"), acc.config(thread_id, leaf))
    assert resumed["messages"][-1].content == "resumed: yes"


def test_resume_targets_branch_parents_and_protect_ids_are_kept_with_their_reason(acc):
    thread_id = new_thread()
    branch, _ = with_sibling_branch(acc, thread_id)
    leaf = branch[0]
    for references, policy, reason in (
        ({leaf: "resume target of unfinished run r1"}, SIBLINGS, "resume target of unfinished run r1"),
        ({leaf: "branch parent of thread t2"}, SIBLINGS, "branch parent of thread t2"),
        ({}, RetentionPolicy(prune_siblings=True, protect_ids=frozenset({leaf})), "explicitly protected"),
    ):
        report = thread_checkpoints_prune(thread_id=thread_id, policy=policy, references=references)
        assert report.deleted == []
        reasons = {p["checkpoint_id"]: p["reasons"] for p in report.protected}
        assert reasons[leaf] == [reason]
        assert any(r.startswith("lineage of") and leaf in r for r in reasons[branch[1]])
    assert set(branch) <= set(ids(acc, thread_id))
    # Once nothing needs it, the branch goes.
    assert {d["checkpoint_id"] for d in thread_checkpoints_prune(thread_id=thread_id, policy=SIBLINGS).deleted} == set(
        branch
    )


def test_deleting_a_branch_ancestor_is_refused_loudly_and_deletes_nothing(acc):
    thread_id = new_thread()
    branch, _ = with_sibling_branch(acc, thread_id)
    head = acc.get(thread_id)
    base = checkpoint_id_of(find_checkpoint_before_message(acc, thread_id, head, human_ids(head)[1]))
    storage = thread_storage_get(thread_id=thread_id)
    for protected_id, reason in ((base, "lineage of the head of namespace ''"), (ids(acc, thread_id)[0], "head")):
        policy = RetentionPolicy(prune_siblings=True, delete_ids=frozenset({protected_id, branch[0]}))
        with pytest.raises(CheckpointProtectedError) as raised:
            thread_checkpoints_prune(thread_id=thread_id, policy=policy)
        assert raised.value.checkpoint_id == protected_id
        assert protected_id in str(raised.value) and reason in str(raised.value)
        assert "Nothing was deleted" in str(raised.value)
    assert thread_storage_get(thread_id=thread_id) == storage


def test_explicit_delete_takes_the_checkpoint_with_its_subtree_only(acc):
    thread_id = new_thread()
    branch, ends = with_sibling_branch(acc, thread_id)
    root = branch[-1]  # the fork's first checkpoint
    leaf = metadata_only_child(acc, thread_id, ends[0])
    turn(acc, thread_id, "keeps the metadata-only leaf off-chain", checkpoint_id=ids(acc, thread_id)[1])
    report = thread_checkpoints_prune(thread_id=thread_id, policy=RetentionPolicy(delete_ids=frozenset({root})))
    assert {d["checkpoint_id"] for d in report.deleted} == set(branch)
    assert {d["shape"] for d in report.deleted} == {"explicit"}
    assert leaf in ids(acc, thread_id)  # explicit mode runs no shape
    assert_resumable(acc, thread_id, explicit_id=ends[1])


def test_max_delete_bounds_each_pass(acc):
    thread_id = new_thread()
    branch, _ = with_sibling_branch(acc, thread_id)
    with pytest.raises(ValueError, match="max_delete must be >= 0, got -1"):
        RetentionPolicy(max_delete=-1)
    assert thread_checkpoints_prune(thread_id=thread_id, policy=RetentionPolicy(max_delete=0)).deleted == []
    capped = RetentionPolicy(prune_siblings=True, max_delete=1)
    first = thread_checkpoints_prune(thread_id=thread_id, policy=capped)
    assert [d["checkpoint_id"] for d in first.deleted] == [branch[0]] and first.max_delete_reached
    # The cut leaves its parent a leaf whose writes the deleted child consumed: they go with it,
    # so the next pass does not mistake them for pending state.
    assert first.writes_dropped == [branch[1]]
    assert orphans(thread_id)["parents"] == 0
    second = thread_checkpoints_prune(thread_id=thread_id, policy=capped)
    assert [d["checkpoint_id"] for d in second.deleted] == [branch[1]]
    assert not set(branch[:2]) & set(ids(acc, thread_id))


def test_unknown_explicit_checkpoint_is_not_found():
    acc = make_accessor("full")
    thread_id = new_thread()
    turn(acc, thread_id, "hello")
    with pytest.raises(CheckpointNotFoundError):
        thread_checkpoints_prune(thread_id=thread_id, policy=RetentionPolicy(delete_ids=frozenset({"nope"})))


def test_a_thread_that_changes_between_plan_and_apply_is_left_alone(acc):
    thread_id = new_thread()
    branch, _ = with_sibling_branch(acc, thread_id)
    run = RetentionRun(thread_id=thread_id, policy=SIBLINGS, graph_id="lead_agent", saver=acc.saver, dry_run=False)
    plan = run.plan({})
    assert {d["checkpoint_id"] for d in plan.report.deleted} == set(branch)
    # A client resumes the abandoned leaf after the plan was made.
    turn(acc, thread_id, "resumed the branch", checkpoint_id=branch[0])
    before = thread_storage_get(thread_id=thread_id)
    with pytest.raises(RetentionConflictError, match="changed while its retention pass was planned"):
        with transaction.atomic():
            run.apply(plan, {})
    assert thread_storage_get(thread_id=thread_id) == before
    assert orphans(thread_id) == {"writes": 0, "blobs": 0, "parents": 0}
    # References that change in between refuse the same way.
    plan = run.plan({})
    with pytest.raises(RetentionConflictError):
        with transaction.atomic():
            run.apply(plan, {branch[0]: "resume target of unfinished run r9"})
    assert thread_storage_get(thread_id=thread_id) == before
