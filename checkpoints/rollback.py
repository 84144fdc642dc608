"""Rollback points: the pre-run state of a thread, and putting it back.

Capture happens before a run mutates anything. Restore is mode-aware:

- full: fork from the captured checkpoint, writing only ``messages`` (every
  other channel is inherited from that parent), so the fork becomes the head;
- delta: forking is unsafe (the captured checkpoint now also owns the
  cancelled run's writes, which a delta replay would pick up), so every
  channel is replaced on the current head instead; channels that exist only
  on the newer head reset to empty.

In both modes only the captured pre-run pending writes are re-attached to
the restored checkpoint; the cancelled run's writes are dropped. A thread
that had no checkpoint before the run goes back to empty.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from checkpoints.accessor import StateAccessor

RESTORE_NODE = "rollback_restore"


class RollbackError(RuntimeError):
    """The restore could not be completed safely."""


@dataclass(frozen=True)
class RollbackPoint:
    """The head before a run: its id (None: no checkpoint), values and pending writes."""

    checkpoint_id: str | None
    values: dict[str, Any] = field(default_factory=dict)
    pending_writes: tuple[tuple[str, str, Any], ...] = ()


async def acapture(accessor: StateAccessor, thread_id: str) -> RollbackPoint:
    """Capture the materialized head and its raw pending writes (raises on any failure)."""
    head = await accessor.ahead_tuple(thread_id)
    if head is None:
        return RollbackPoint(None)
    snapshot = await accessor.aget(thread_id)
    return RollbackPoint(
        checkpoint_id=head.config["configurable"]["checkpoint_id"],
        values=copy.deepcopy(dict(snapshot.values or {})),
        pending_writes=tuple(head.pending_writes or ()),
    )


def _empty_like(value: Any) -> Any:
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    return None


def replacement(accessor: StateAccessor, selected: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """Return values that make the head equal ``selected``; head-only channels become empty."""
    channels = accessor.writable_channels()
    values = {name: value for name, value in selected.items() if name in channels}
    for name, value in head.items():
        if name in channels and name not in values:
            values[name] = _empty_like(value)
    return values


def _writes_by_task(writes: tuple) -> dict[str, list[tuple[str, Any]]]:
    grouped: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for write in writes:
        if not isinstance(write, (tuple, list)) or len(write) != 3:
            raise RollbackError(f"malformed pending write {write!r}: expected (task_id, channel, value)")
        task_id, channel, value = write
        if not isinstance(channel, str):
            raise RollbackError(f"malformed pending write {write!r}: channel must be a string")
        grouped[str(task_id)].append((channel, value))
    return grouped


async def arestore(accessor: StateAccessor, thread_id: str, point: RollbackPoint) -> str | None:
    """Put the thread back to ``point``; return the restored head id (None: emptied)."""
    if point.checkpoint_id is None:
        await accessor.saver.adelete_thread(thread_id)
        return None
    if accessor.mode == "full":
        values = {"messages": point.values.get("messages", [])} if "messages" in accessor.writable_channels() else {}
        config = await accessor.aupdate(thread_id, values, as_node=RESTORE_NODE, checkpoint_id=point.checkpoint_id)
    else:
        head = await accessor.aget(thread_id)
        values = replacement(accessor, point.values, dict(head.values or {}))
        config = await accessor.aupdate(thread_id, values, as_node=RESTORE_NODE)
    checkpoint_id = (config or {}).get("configurable", {}).get("checkpoint_id")
    if not checkpoint_id:
        raise RollbackError("the restore did not return checkpoint_id")
    for task_id, writes in _writes_by_task(point.pending_writes).items():
        await accessor.saver.aput_writes(config, writes, task_id)
    return checkpoint_id
