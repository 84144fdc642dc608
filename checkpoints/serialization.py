"""Turn LangGraph state into the JSON the LangGraph Platform API returns.

Every REST state response and every streamed ``values`` frame goes through
here, so one rule holds everywhere: messages hidden from the UI
(``additional_kwargs.hide_from_ui``) lose their ``data:`` image blocks, and
nothing else is touched (count and order of messages stay the same).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date, datetime
from enum import Enum
from typing import Any
from uuid import UUID

from langchain_core.messages import BaseMessage
from langgraph.types import Interrupt, PregelTask, StateSnapshot
from pydantic import BaseModel


def serialize(obj: Any) -> Any:
    """Return a JSON-ready copy of ``obj`` (messages, pydantic, interrupts, dataclasses)."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): serialize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [serialize(v) for v in obj]
    if isinstance(obj, Interrupt):
        return {"value": serialize(obj.value), "id": obj.id}
    if isinstance(obj, BaseMessage):
        return serialize(obj.model_dump())
    if isinstance(obj, BaseModel):
        return serialize(obj.model_dump())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return serialize(dataclasses.asdict(obj))
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if isinstance(obj, (UUID, Enum)):
        return str(obj.value if isinstance(obj, Enum) else obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    return str(obj)


def _is_data_image_block(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") != "image_url":
        return False
    image = block.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return isinstance(url, str) and url.startswith("data:")


def strip_hidden_data_images(message: dict[str, Any]) -> dict[str, Any]:
    """Drop ``data:`` image blocks from a serialized message hidden from the UI."""
    hidden = (message.get("additional_kwargs") or {}).get("hide_from_ui") is True
    content = message.get("content")
    if not hidden or not isinstance(content, list):
        return message
    return {**message, "content": [b for b in content if not _is_data_image_block(b)]}


def serialize_channel_values(values: Any) -> Any:
    """Serialize state values for the API: no ``__pregel_*`` keys, hidden images stripped."""
    if not isinstance(values, Mapping):
        return serialize(values)
    out = {k: serialize(v) for k, v in values.items() if not str(k).startswith("__pregel_")}
    if isinstance(out.get("messages"), list):
        out["messages"] = [strip_hidden_data_images(m) if isinstance(m, dict) else m for m in out["messages"]]
    return out


def checkpoint_ref(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Return the SDK's ``Checkpoint`` object for a RunnableConfig, or None."""
    if not config:
        return None
    configurable = config.get("configurable") or {}
    return {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
        "checkpoint_map": configurable.get("checkpoint_map"),
    }


def _task(task: PregelTask) -> dict[str, Any]:
    state = task.state
    if isinstance(state, StateSnapshot):
        state = thread_state(state)
    elif state is not None:
        state = {"checkpoint": checkpoint_ref(state)}
    return {
        "id": task.id,
        "name": task.name,
        "path": serialize(task.path),
        "error": repr(task.error) if task.error is not None else None,
        "interrupts": serialize(list(task.interrupts)),
        "checkpoint": None,
        "state": state,
        "result": serialize(task.result),
    }


def thread_state(snapshot: StateSnapshot) -> dict[str, Any]:
    """Return the SDK's ``ThreadState`` for a LangGraph ``StateSnapshot``."""
    checkpoint = checkpoint_ref(snapshot.config)
    parent = checkpoint_ref(snapshot.parent_config)
    return {
        "values": serialize_channel_values(snapshot.values),
        "next": list(snapshot.next),
        "tasks": [_task(t) for t in snapshot.tasks],
        "checkpoint": checkpoint,
        "checkpoint_id": checkpoint["checkpoint_id"] if checkpoint else None,
        "metadata": serialize(snapshot.metadata or {}),
        "created_at": snapshot.created_at,
        "parent_checkpoint": parent,
        "parent_checkpoint_id": parent["checkpoint_id"] if parent else None,
        "interrupts": serialize(list(snapshot.interrupts)),
    }


def thread_interrupts(snapshot: StateSnapshot) -> dict[str, list[dict[str, Any]]]:
    """Return pending interrupts keyed by task id, as the SDK's ``Thread.interrupts``."""
    return {task.id: serialize(list(task.interrupts)) for task in snapshot.tasks if task.interrupts}
