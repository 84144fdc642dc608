"""A thread's LangGraph checkpoints: read with the source's saver, written with ours.

Ids, parent links, metadata, namespaces and pending writes (with the task
path each was stored with) are kept, so delta channels still reach their
snapshot seeds and a step's writes replay in the source's order. A
checkpoint counts as imported once its row is here: its writes are stored
first, so an interrupted copy is completed by the next run, never half-kept.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db import connection
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from checkpoints.backend import current_backend
from deerflow_site.deerflow_import.records import Tally
from deerflow_site.deerflow_import.source import SourceDatabase

# LangGraph names its checkpoint table the same on SQLite and PostgreSQL.
CHECKPOINT_IDS_SQL = "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = %s"


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> RunnableConfig:
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _every_namespace(thread_id: str) -> RunnableConfig:
    """A config that lists the thread's checkpoints in every namespace (no ``checkpoint_ns`` key)."""
    return {"configurable": {"thread_id": thread_id}}


def checkpoint_ids_here(saver: BaseCheckpointSaver, thread_id: str) -> set[tuple[str, str]]:
    """Return (namespace, id) of the thread's checkpoints in our database, without decoding them."""
    if current_backend().kind == "memory":
        return {_ref(item) for item in saver.list(_every_namespace(thread_id))}
    with connection.cursor() as cursor:
        cursor.execute(CHECKPOINT_IDS_SQL, [thread_id])
        return {(ns, checkpoint_id) for ns, checkpoint_id in cursor.fetchall()}


def checkpoint_ids_there(source: SourceDatabase, thread_id: str) -> set[tuple[str, str]]:
    return {(r["checkpoint_ns"], r["checkpoint_id"]) for r in source.execute(CHECKPOINT_IDS_SQL, (thread_id,))}


def _ref(item: CheckpointTuple) -> tuple[str, str]:
    configurable = item.config["configurable"]
    return configurable.get("checkpoint_ns", ""), configurable["checkpoint_id"]


def _put(target: BaseCheckpointSaver, thread_id: str, item: CheckpointTuple, paths: dict[Any, str]) -> None:
    """Store one checkpoint's pending writes (grouped by task, in their order), then the checkpoint."""
    ns, checkpoint_id = _ref(item)
    by_task: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for task_id, channel, value in item.pending_writes or ():
        by_task[task_id].append((channel, value))
    for task_id, writes in by_task.items():
        target.put_writes(
            _config(thread_id, ns, checkpoint_id), writes, task_id, paths.get((ns, checkpoint_id, task_id), "")
        )
    parent_id = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    checkpoint = item.checkpoint
    target.put(_config(thread_id, ns, parent_id), checkpoint, item.metadata, dict(checkpoint["channel_versions"]))


def thread_checkpoints_import(
    source: SourceDatabase,
    *,
    source_saver: BaseCheckpointSaver,
    target_saver: BaseCheckpointSaver,
    thread_id: str,
    tally: Tally,
    dry_run: bool,
) -> None:
    """Copy the thread's checkpoints that are not here yet, oldest first."""
    wanted = checkpoint_ids_there(source, thread_id)
    missing = wanted - checkpoint_ids_here(target_saver, thread_id)
    tally.found += len(wanted)
    tally.present += len(wanted) - len(missing)
    if dry_run or not missing:
        tally.imported += len(missing)
        return
    items = [item for item in source_saver.list(_every_namespace(thread_id)) if _ref(item) in missing]
    paths = source.task_paths(thread_id)
    for item in reversed(items):
        _put(target_saver, thread_id, item, paths)
        tally.imported += 1
