"""Turn LangGraph state into the JSON the LangGraph Platform API returns.

Every REST state response and every streamed ``values`` frame goes through
here, so one rule holds everywhere: messages hidden from the UI
(``additional_kwargs.hide_from_ui``) lose their ``data:`` image blocks, and
nothing else is touched (count and order of messages stay the same).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import date, datetime
from enum import Enum
from typing import Any
from uuid import UUID

import orjson
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
    state: dict[str, Any] | None = None
    if isinstance(task.state, StateSnapshot):
        state = thread_state(task.state)
    elif task.state is not None:
        state = {"checkpoint": checkpoint_ref(task.state)}
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
    return {**thread_state_shell(snapshot), "values": serialize_channel_values(snapshot.values)}


def thread_state_shell(snapshot: StateSnapshot) -> dict[str, Any]:
    """Return a ``ThreadState`` without its ``values`` (the part that is cheap to serialize)."""
    checkpoint = checkpoint_ref(snapshot.config)
    parent = checkpoint_ref(snapshot.parent_config)
    return {
        "values": None,
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


class StateEncoder:
    """Encode ``ThreadState`` JSON for one request, each message object once.

    Equal to ``json.dumps(thread_state(snapshot))`` after parsing, but a
    message shared by many snapshots (``decode_memo.shared_decodes``) is
    serialized and encoded once, and every snapshot embeds those bytes as an
    ``orjson.Fragment``: on a 200-turn thread, history limit 100 holds ~37,000
    messages and ~400 distinct ones. Keyed by ``id()``; the encoder keeps each
    keyed object alive, so an id is never reused while it is in the table.
    """

    def __init__(self) -> None:
        self._messages: dict[int, tuple[BaseMessage, orjson.Fragment]] = {}

    def _message(self, message: Any) -> Any:
        if not isinstance(message, BaseMessage):
            out = serialize(message)
            return strip_hidden_data_images(out) if isinstance(out, dict) else out
        cached = self._messages.get(id(message))
        if cached is None:
            fragment = orjson.Fragment(orjson.dumps(strip_hidden_data_images(serialize(message))))
            cached = self._messages[id(message)] = (message, fragment)
        return cached[1]

    def _values(self, values: Any) -> Any:
        if not isinstance(values, Mapping):
            return serialize(values)
        out = {k: serialize(v) for k, v in values.items() if not str(k).startswith("__pregel_") and k != "messages"}
        if "messages" in values:
            messages = values["messages"]
            if isinstance(messages, (list, tuple)):
                out["messages"] = [self._message(m) for m in messages]
            else:
                out["messages"] = serialize(messages)
        return out

    def state(self, snapshot: StateSnapshot, select: Iterable[str] | None = None) -> bytes:
        """Return one snapshot's ThreadState JSON (only the ``select`` keys, if given)."""
        state = {**thread_state_shell(snapshot), "values": self._values(snapshot.values)}
        if select:
            state = {k: v for k, v in state.items() if k in select}
        try:
            return orjson.dumps(state)
        except orjson.JSONEncodeError:
            # Integers beyond 64 bits or non-string keys in user state: the stdlib encoder takes them.
            plain = thread_state(snapshot)
            if select:
                plain = {k: v for k, v in plain.items() if k in select}
            return json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()

    def states(self, snapshots: Iterable[StateSnapshot], select: Iterable[str] | None = None) -> Iterator[bytes]:
        """Yield a JSON array of ThreadStates in pieces, one snapshot at a time."""
        return json_array(self.state(snapshot, select) for snapshot in snapshots)


def json_array(entries: Iterable[bytes]) -> Iterator[bytes]:
    """Yield a JSON array of encoded entries in pieces."""
    yield b"["
    for index, entry in enumerate(entries):
        if index:
            yield b","
        yield entry
    yield b"]"
