"""A thread as one JSON document for a bug report: metadata, state, checkpoint lineage, branches, runs, events.

State is read through the accessor (a full-mode process exports the gate's
message for a delta thread instead of partial state); the checkpoint list
comes from one metadata read of LangGraph's tables, without payloads. Each
abandoned branch (a tip of the root namespace off the head's lineage: a
regenerated answer, an edited question, a rolled-back fork) is exported
with where it left the lineage and the messages it holds that the head does
not, read at its tip: the newest ``BRANCHES_EXPORTED`` of them. Runs carry
their input (the request as executed, ``kwargs``; secrets never stored).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils import timezone

from checkpoints.accessor import state_accessor, thread_config
from checkpoints.errors import CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError
from checkpoints.modes import metadata_uses_delta
from checkpoints.runtime import sync_resources
from checkpoints.serialization import serialize, thread_state
from checkpoints.storage import UnsupportedBackendError, thread_tables_read
from threads.models import ThreadMeta

EXPORT_FORMAT = "deerflow-thread-export/1"
RUN_FIELDS = (
    "run_id",
    "assistant_id",
    "status",
    "multitask_strategy",
    "cancel_action",
    "error",
    "model_name",
    "total_input_tokens",
    "total_output_tokens",
    "total_tokens",
    "token_usage_by_model",
    "token_usage_by_caller",
    "metadata",
    "kwargs",
    "created_at",
    "started_at",
    "finished_at",
)
# Each branch costs one state read at its tip.
BRANCHES_EXPORTED = 20
EVENT_FIELDS = ("seq", "run_id", "event_type", "category", "content", "metadata", "created_at")


def _checkpoints(thread_id: str) -> list[dict[str, Any]]:
    """Return every checkpoint's id, namespace, parent, step, source and mode, oldest first."""
    rows: list[tuple[str, str, str | None, Mapping[str, Any] | None]]
    try:
        tables = thread_tables_read(thread_id=thread_id, serde=sync_resources().saver.serde)
        rows = [(row.ns, row.checkpoint_id, row.parent_id, row.metadata) for row in tables.checkpoints.values()]
    except UnsupportedBackendError:  # the memory backend: list through the saver
        saver = sync_resources().saver
        rows = [
            (
                t.config["configurable"].get("checkpoint_ns", ""),
                t.config["configurable"]["checkpoint_id"],
                (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                t.metadata,
            )
            for t in saver.list(thread_config(thread_id))
        ]
    return [
        {
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_id,
            "step": (metadata or {}).get("step"),
            "source": (metadata or {}).get("source"),
            "channel_mode": "delta" if metadata_uses_delta(metadata) else "full",
        }
        for ns, checkpoint_id, parent_id, metadata in sorted(rows, key=lambda row: (row[0], row[1]))
    ]


def _branches(checkpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the root namespace's tips off the head's lineage, newest first, with their fork point and length."""
    root = {c["checkpoint_id"]: c["parent_checkpoint_id"] for c in checkpoints if c["checkpoint_ns"] == ""}
    if not root:
        return []
    head = max(root)  # LangGraph's ids sort by time: the head is the newest, as the saver reads it
    lineage, cursor = set(), head
    while cursor in root and cursor not in lineage:
        lineage.add(cursor)
        cursor = root[cursor]
    parents = set(root.values())
    branches = []
    for tip in sorted((c for c in root if c not in parents and c not in lineage), reverse=True):
        length, cursor = 0, tip
        while cursor in root and cursor not in lineage:
            length, cursor = length + 1, root[cursor]
        branches.append({"tip_checkpoint_id": tip, "fork_checkpoint_id": cursor, "checkpoints": length})
    return branches


def _branch_messages(thread: ThreadMeta, tip: str, head_ids: set[str]) -> dict[str, Any]:
    try:
        snapshot = state_accessor(thread.assistant_id).get(thread.thread_id, checkpoint_id=tip)
    except (CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError) as exc:
        return {"messages_not_in_head": None, "state_error": str(exc)}
    messages = [m for m in (snapshot.values or {}).get("messages") or [] if getattr(m, "id", None) not in head_ids]
    return {"messages_not_in_head": serialize(messages)}


def _abandoned_branches(thread: ThreadMeta, checkpoints: list[dict[str, Any]], state: dict[str, Any]) -> dict:
    branches = _branches(checkpoints)
    head_messages = ((state.get("state") or {}).get("values") or {}).get("messages") or []
    head_ids = {str(m["id"]) for m in head_messages if isinstance(m, dict) and m.get("id")}
    exported = [
        {**b, **_branch_messages(thread, b["tip_checkpoint_id"], head_ids)} for b in branches[:BRANCHES_EXPORTED]
    ]
    return {"branches": exported, "branches_not_exported": len(branches) - len(exported)}


def _state(thread: ThreadMeta) -> dict[str, Any]:
    try:
        return {"state": thread_state(state_accessor(thread.assistant_id).get(thread.thread_id))}
    except (CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError) as exc:
        return {"state": None, "state_error": f"Thread {thread.thread_id}: {exc}"}


def thread_export(*, thread: ThreadMeta) -> dict[str, Any]:
    """Return the export document of ``thread`` (JSON-ready)."""
    runs = thread.runs.order_by("created_at", "run_id").values(*RUN_FIELDS)
    events = thread.events.order_by("seq").values(*EVENT_FIELDS)
    state = serialize(_state(thread))
    checkpoints = _checkpoints(thread.thread_id)
    return {
        "format": EXPORT_FORMAT,
        "exported_at": timezone.now().isoformat(),
        "thread": serialize(
            {
                "thread_id": thread.thread_id,
                "owner": thread.owner.get_username(),
                "assistant_id": thread.assistant_id,
                "title": thread.display_name,
                "status": thread.status,
                "metadata": thread.metadata,
                "created_at": thread.created_at,
                "updated_at": thread.updated_at,
            }
        ),
        **state,
        "checkpoints": checkpoints,
        **_abandoned_branches(thread, checkpoints, state),
        "runs": serialize(list(runs)),
        "events": serialize(list(events)),
    }
