"""Whole-thread checkpoint operations: delete and copy, through the saver API."""

from __future__ import annotations

from collections import defaultdict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoints.runtime import sync_resources
from checkpoints.storage import write_task_paths


def _target_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> RunnableConfig:
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def copy_thread_checkpoints(saver: BaseCheckpointSaver, *, source_thread_id: str, target_thread_id: str) -> int:
    """Copy every checkpoint and pending write of a thread, ids and parent links intact.

    The whole parent chain is copied oldest first, so delta channels in the
    copy still reach their snapshot seeds, and each task's writes keep the
    task path they were stored with, so the copy replays a step's parallel
    writes in the source's order. Returns the number of checkpoints.
    """
    tuples = list(saver.list({"configurable": {"thread_id": source_thread_id}}))
    # Read after listing: every listed write was committed before, so its path is there.
    paths = write_task_paths(saver, thread_id=source_thread_id)
    for item in reversed(tuples):
        ns = item.config["configurable"].get("checkpoint_ns", "")
        parent_id = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        checkpoint = item.checkpoint
        saver.put(
            _target_config(target_thread_id, ns, parent_id),
            checkpoint,
            item.metadata,
            dict(checkpoint["channel_versions"]),
        )
        by_task: dict[str, list[tuple[str, object]]] = defaultdict(list)
        for task_id, channel, value in item.pending_writes or ():
            by_task[task_id].append((channel, value))
        for task_id, writes in by_task.items():
            path = paths.get((ns, checkpoint["id"], task_id), "")
            saver.put_writes(_target_config(target_thread_id, ns, checkpoint["id"]), writes, task_id, path)
    return len(tuples)


def thread_checkpoints_copy(*, source_thread_id: str, target_thread_id: str) -> int:
    """Copy a thread's checkpoints with this process's sync saver."""
    return copy_thread_checkpoints(
        sync_resources().saver, source_thread_id=source_thread_id, target_thread_id=target_thread_id
    )


def thread_checkpoints_delete(*, thread_id: str) -> None:
    """Delete every checkpoint, write and blob of a thread."""
    sync_resources().saver.delete_thread(thread_id)
