"""A thread as one JSON document for a bug report: metadata, state, checkpoint lineage, runs, events.

State is read through the accessor (a full-mode process exports the gate's
message for a delta thread instead of partial state); the checkpoint list
comes from one metadata read of LangGraph's tables, without payloads.
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
    "created_at",
    "started_at",
    "finished_at",
)
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


def _state(thread: ThreadMeta) -> dict[str, Any]:
    try:
        return {"state": thread_state(state_accessor(thread.assistant_id).get(thread.thread_id))}
    except (CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError) as exc:
        return {"state": None, "state_error": f"Thread {thread.thread_id}: {exc}"}


def thread_export(*, thread: ThreadMeta) -> dict[str, Any]:
    """Return the export document of ``thread`` (JSON-ready)."""
    runs = thread.runs.order_by("created_at", "run_id").values(*RUN_FIELDS)
    events = thread.events.order_by("seq").values(*EVENT_FIELDS)
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
        **serialize(_state(thread)),
        "checkpoints": _checkpoints(thread.thread_id),
        "runs": serialize(list(runs)),
        "events": serialize(list(events)),
    }
