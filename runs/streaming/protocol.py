"""Protocol-v2 events from LangGraph's own stream modes (no stream transformers needed).

One ``ProtocolTranslator`` per run turns the ``(namespace, mode, data)``
chunks of ``graph.astream(..., subgraphs=True)`` into the thread log's events:
``lifecycle`` (root ``running`` → exactly one terminal; subgraph ``started`` →
``completed``), ``values``, ``updates``, ``messages`` (the content-block
lifecycle, tool-call chunks, usage), ``tools``, ``custom``, ``tasks``,
``checkpoints`` (just before the ``values`` of the same step) and
``input.requested``. Event ids are deterministic (``<run_id>:<n>`` for graph
events, ``synth:<run_id>:…`` for synthesised ones), so they are the same on
every connection. Nothing here does I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.utils.utils import LC_ID_PREFIX

from checkpoints.serialization import serialize, serialize_channel_values
from threads.stream_log import PendingEvent

# What the executor asks LangGraph for, whatever the client's stream_mode.
PROTOCOL_STREAM_MODES = ("values", "updates", "messages", "custom", "tasks", "checkpoints", "tools")
CHANNELS = ("values", "updates", "messages", "tools", "lifecycle", "input", "checkpoints", "tasks", "custom")
TERMINAL = ("completed", "failed", "interrupted")


def channel_of(event: dict) -> str:
    """Return the channel an event belongs to (``input.requested`` is on ``input``)."""
    method = event["method"]
    return "input" if method.startswith("input.") else method


def _segment_matches(prefix: str, candidate: str) -> bool:
    return prefix == candidate or (":" not in prefix and candidate.split(":", 1)[0] == prefix)


def namespace_matches(namespace: list[str], prefixes: list[list[str]] | None, depth: int | None) -> bool:
    """Prefix match as both SDKs do it: a segment without ``:`` matches ``name:<id>``."""
    if not prefixes:
        return depth is None or len(namespace) <= depth
    for prefix in prefixes:
        if len(prefix) > len(namespace):
            continue
        if all(_segment_matches(p, c) for p, c in zip(prefix, namespace, strict=False)):
            if depth is None or len(namespace) - len(prefix) <= depth:
                return True
    return False


@dataclass(frozen=True)
class EventFilter:
    """A subscription: channels (``custom:<name>`` matches ``data.name``), namespaces, depth."""

    channels: tuple[str, ...]
    namespaces: tuple[tuple[str, ...], ...] | None = None
    depth: int | None = None

    def matches(self, event: dict) -> bool:
        channel = channel_of(event)
        params = event["params"]
        if channel not in self.channels:
            data = params.get("data")
            name = data.get("name") if channel == "custom" and isinstance(data, dict) else None
            if name is None or f"custom:{name}" not in self.channels:
                return False
        prefixes = [list(p) for p in self.namespaces] if self.namespaces is not None else None
        return namespace_matches(params.get("namespace") or [], prefixes, self.depth)


def filter_methods(event_filter: EventFilter) -> tuple[str, ...]:
    """Return the log methods a filter can match (``input`` is every ``input.*``), for the database to filter."""
    return tuple(sorted({"input." if c == "input" else c.split(":", 1)[0] for c in event_filter.channels}))


def parse_filter(params: Any) -> EventFilter:
    """Validate a subscribe body; raise ValueError with the reference's wording."""
    if not isinstance(params, dict):
        raise ValueError("channels is required and must be a non-empty array")
    channels = params.get("channels")
    if not isinstance(channels, list) or not channels or not all(isinstance(c, str) for c in channels):
        raise ValueError("channels is required and must be a non-empty array")
    unsupported = [c for c in channels if c not in CHANNELS and not (c.startswith("custom:") and len(c) > 7)]
    if unsupported:
        raise ValueError(
            f"channels contains unsupported entries: {', '.join(unsupported)}. Supported: {', '.join(CHANNELS)}, custom:<name>."
        )
    raw = params.get("namespaces")
    namespaces = None
    if isinstance(raw, list) and raw:
        kept = [tuple(ns) for ns in raw if isinstance(ns, list) and all(isinstance(s, str) for s in ns)]
        namespaces = tuple(kept) if kept else None
    return EventFilter(channels=tuple(channels), namespaces=namespaces, depth=non_negative_int(params.get("depth")))


def non_negative_int(value: Any) -> int | None:
    """Return ``value`` when it is a non-negative int (booleans are not), else None (ignored)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass
class _Block:
    index: int
    kind: str  # "text" | "tool"
    text: str = ""
    tool_id: str | None = None
    name: str | None = None
    args: str = ""

    def finished(self) -> dict[str, Any]:
        if self.kind == "text":
            return {"type": "text", "text": self.text}
        try:
            args = json.loads(self.args) if self.args else {}
        except ValueError:
            return {"type": "invalid_tool_call", "id": self.tool_id, "name": self.name, "args": self.args}
        return {"type": "tool_call", "id": self.tool_id, "name": self.name, "args": args}


@dataclass
class _Message:
    id: str | None
    blocks: dict[tuple[str, Any], _Block] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)


def _role(message: BaseMessage) -> str:
    return {"human": "human", "system": "system", "tool": "tool"}.get(message.type, "ai")


def _text_parts(content: Any) -> list[tuple[Any, str]]:
    """Return ``(block key, text)`` pairs of a chunk's content (a string is block 0)."""
    if isinstance(content, str):
        return [(0, content)] if content else []
    parts = []
    for position, block in enumerate(content or ()):
        if isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
            parts.append((block.get("index", position), block["text"]))
        elif isinstance(block, str) and block:
            parts.append((position, block))
    return parts


class ProtocolTranslator:
    """Turn one run's LangGraph chunks into protocol events, in order."""

    def __init__(self, *, run_id: str, graph_name: str) -> None:
        self.run_id = run_id
        self.graph_name = graph_name
        self.started = False
        self._n = 0
        self._held_values: dict[tuple[str, ...], PendingEvent] = {}
        self._messages: dict[tuple[str, ...], _Message] = {}
        self._subgraphs: dict[tuple[str, ...], str] = {}  # namespace -> status

    # -- event construction ----------------------------------------------------

    def _event(self, method: str, namespace: tuple[str, ...], data: Any) -> PendingEvent:
        self._n += 1
        return PendingEvent(f"{self.run_id}:{self._n}", method, list(namespace), data)

    def _synthetic(self, kind: str, namespace: tuple[str, ...], key: str, method: str, data: Any) -> PendingEvent:
        return PendingEvent(f"synth:{self.run_id}:{kind}|{'|'.join(namespace)}|{key}", method, list(namespace), data)

    def running(self) -> list[PendingEvent]:
        """Return the root ``running`` event that opens the run."""
        self.started = True
        return [self._synthetic("lc", (), "running", "lifecycle", {"event": "running", "graph_name": self.graph_name})]

    # -- graph chunks ------------------------------------------------------------

    def feed(self, namespace: tuple[str, ...], mode: str, data: Any, *, serialized: Any = None) -> list[PendingEvent]:
        """Return the events one LangGraph chunk stands for (possibly none, possibly held ones).

        ``serialized``: the chunk's values already serialized for the classic
        stream (serializing a long state twice per step costs more than the
        rest of the translation).
        """
        out: list[PendingEvent] = []
        if namespace and namespace not in self._subgraphs:
            out.extend(self._subgraph_started(namespace))
        if mode == "checkpoints":
            out.append(self._event("checkpoints", namespace, _checkpoint(data)))
            if (held := self._held_values.pop(namespace, None)) is not None:
                out.append(held)
            return out
        out.extend(self._release_values(namespace))
        if mode == "values":
            if serialized is None:
                serialized = serialize_channel_values(data)
            values = {k: v for k, v in serialized.items() if k != "__interrupt__"}
            self._held_values[namespace] = self._event("values", namespace, values)
        elif mode == "messages":
            out.extend(self._message(namespace, *data))
        else:
            out.extend(self._close_message(namespace))
            if mode == "updates":
                out.append(self._event("updates", namespace, serialize(_without_interrupt(data))))
                out.extend(self._subgraphs_finished_by(namespace, data))
            elif mode == "tasks" and isinstance(data, dict):
                # A task's input is the whole state, already on ``values``: not repeated.
                out.append(self._event("tasks", namespace, serialize({k: v for k, v in data.items() if k != "input"})))
            elif mode in ("tools", "custom"):
                out.append(self._event(mode, namespace, serialize(data)))
                if mode == "tools" and isinstance(data, dict) and data.get("event") == "tool-finished":
                    out.extend(self._tool_message(namespace, data))
        return out

    def _release_values(self, namespace: tuple[str, ...]) -> list[PendingEvent]:
        held = self._held_values.pop(namespace, None)
        return [held] if held is not None else []

    def _subgraph_started(self, namespace: tuple[str, ...]) -> list[PendingEvent]:
        out = []
        if len(namespace) > 1 and namespace[:-1] not in self._subgraphs:
            out.extend(self._subgraph_started(namespace[:-1]))
        self._subgraphs[namespace] = "started"
        name, _, task_id = namespace[-1].partition(":")
        data = {"event": "started", "namespace": list(namespace), "graph_name": name, "trigger_call_id": task_id}
        out.append(self._synthetic("lc", namespace, "started", "lifecycle", data))
        return out

    def _subgraphs_finished_by(self, parent: tuple[str, ...], update: Any) -> list[PendingEvent]:
        """A parent's ``updates`` from node N ends its running subgraph ``N:<id>``."""
        if not isinstance(update, dict):
            return []
        out = []
        for namespace, status in list(self._subgraphs.items()):
            if status != "started" or namespace[:-1] != parent:
                continue
            if namespace[-1].split(":", 1)[0] in update:
                out.extend(self._subgraph_end(namespace, "completed"))
        return out

    def _subgraph_end(self, namespace: tuple[str, ...], status: str) -> list[PendingEvent]:
        out = self._release_values(namespace) + self._close_message(namespace)
        self._subgraphs[namespace] = status
        name = namespace[-1].split(":", 1)[0]
        out.append(self._synthetic("lc", namespace, status, "lifecycle", {"event": status, "graph_name": name}))
        return out

    # -- messages ------------------------------------------------------------------

    def _message(self, namespace: tuple[str, ...], chunk: Any, metadata: Any) -> list[PendingEvent]:
        """Stream what a chat model says; messages a node returns whole are the state's (``values``), as on the Platform."""
        if not isinstance(chunk, BaseMessage) or not _from_chat_model(chunk, metadata):
            return []
        out: list[PendingEvent] = []
        current = self._messages.get(namespace)
        if current is not None and current.id != chunk.id:
            out.extend(self._close_message(namespace))
            current = None
        if current is None:
            current = self._messages[namespace] = _Message(id=chunk.id)
            start = {"event": "message-start", "role": _role(chunk), "id": chunk.id}
            if tool_call_id := getattr(chunk, "tool_call_id", None):  # a ToolMessage's
                start["tool_call_id"] = tool_call_id
            out.append(self._event("messages", namespace, start))
        for key, text in _text_parts(chunk.content):
            block, opened = self._block(current, ("text", key), "text")
            if opened:
                out.append(self._block_start(namespace, block, {"type": "text", "text": ""}))
            block.text += text
            delta = {"type": "text-delta", "text": text}
            out.append(
                self._event(
                    "messages", namespace, {"event": "content-block-delta", "index": block.index, "delta": delta}
                )
            )
        for call in getattr(chunk, "tool_call_chunks", None) or ():
            out.extend(self._tool_chunk(namespace, current, call))
        if not isinstance(chunk, AIMessageChunk):  # a whole message: one start/finish pair
            for call in getattr(chunk, "tool_calls", None) or ():
                raw = {"id": call.get("id"), "name": call.get("name"), "args": json.dumps(call.get("args") or {})}
                out.extend(self._tool_chunk(namespace, current, raw))
        for key, value in (getattr(chunk, "usage_metadata", None) or {}).items():
            if isinstance(value, int):
                current.usage[key] = current.usage.get(key, 0) + value
        final = (chunk.response_metadata or {}).get("finish_reason") or getattr(chunk, "chunk_position", None) == "last"
        if final or not isinstance(chunk, AIMessageChunk):
            out.extend(self._close_message(namespace))
        return out

    def _tool_message(self, namespace: tuple[str, ...], finished: dict[str, Any]) -> list[PendingEvent]:
        """Mirror a finished tool's result as a ``tool`` message in the namespace ``[…, "tools:<call id>"]``."""
        call_id = finished.get("tool_call_id")
        mirror = (*namespace, f"tools:{call_id}")
        content = {"type": "text", "text": _tool_text(finished.get("output"))}
        events = [
            {"event": "message-start", "role": "tool", "id": f"tool-{call_id}", "tool_call_id": call_id},
            {"event": "content-block-start", "index": 0, "content": {"type": "text", "text": ""}},
            {"event": "content-block-delta", "index": 0, "content": content},
            {"event": "content-block-finish", "index": 0, "content": content},
            {"event": "message-finish", "metadata": {}},
        ]
        return [self._event("messages", mirror, data) for data in events]

    def _block(self, message: _Message, key: tuple[str, Any], kind: str) -> tuple[_Block, bool]:
        if (block := message.blocks.get(key)) is not None:
            return block, False
        block = message.blocks[key] = _Block(index=len(message.blocks), kind=kind)
        return block, True

    def _block_start(self, namespace: tuple[str, ...], block: _Block, content: dict) -> PendingEvent:
        return self._event(
            "messages", namespace, {"event": "content-block-start", "index": block.index, "content": content}
        )

    def _tool_chunk(self, namespace: tuple[str, ...], message: _Message, call: dict) -> list[PendingEvent]:
        key = ("tool", call.get("index") if call.get("index") is not None else call.get("id"))
        block, opened = self._block(message, key, "tool")
        out = []
        if opened:
            block.tool_id, block.name = call.get("id"), call.get("name")
            content = {
                "type": "tool_call_chunk",
                "id": block.tool_id,
                "name": block.name,
                "args": "",
                "index": block.index,
            }
            out.append(self._block_start(namespace, block, content))
        if args := call.get("args"):
            block.args += args
            delta = {"type": "tool-call-delta", "args": args}
            out.append(
                self._event(
                    "messages", namespace, {"event": "content-block-delta", "index": block.index, "delta": delta}
                )
            )
        return out

    def _close_message(self, namespace: tuple[str, ...]) -> list[PendingEvent]:
        message = self._messages.pop(namespace, None)
        if message is None:
            return []
        out = [
            self._event(
                "messages", namespace, {"event": "content-block-finish", "index": b.index, "content": b.finished()}
            )
            for b in message.blocks.values()
        ]
        finish: dict[str, Any] = {"event": "message-finish"}
        if message.usage:
            usage = dict(message.usage)
            usage.setdefault("total_tokens", usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
            finish["usage"] = usage
        out.append(self._event("messages", namespace, finish))
        return out

    # -- the end -------------------------------------------------------------------

    def close_open(self, *, failed: bool) -> list[PendingEvent]:
        """Return the events that close what is open: held values, messages, running subgraphs."""
        if not self.started:
            return []
        out: list[PendingEvent] = []
        for namespace in list(self._held_values):
            out.extend(self._release_values(namespace))
        for namespace in list(self._messages):
            out.extend(self._close_message(namespace))
        status = "failed" if failed else "completed"
        for namespace in sorted((ns for ns, s in self._subgraphs.items() if s == "started"), key=len, reverse=True):
            out.extend(self._subgraph_end(namespace, status))
        return out

    def terminal(self, *, status: str, error: str | None, interrupts: list[dict[str, Any]]) -> list[PendingEvent]:
        """Return ``input.requested`` per pending interrupt, then the root terminal event.

        ``status`` is ``completed``, ``failed`` or ``interrupted``. A run that
        never emitted ``running`` (cancelled before it started) ends silently.
        Pure: called again with the final outcome when a rollback changes it.
        """
        if not self.started:
            return []
        out = []
        for interrupt in interrupts:
            requested = {"interrupt_id": interrupt["id"], "payload": interrupt["value"], "value": interrupt["value"]}
            out.append(self._synthetic("input", (), interrupt["id"], "input.requested", requested))
        data: dict[str, Any] = {"event": status, "graph_name": self.graph_name}
        if error:
            data["error"] = error
        out.append(self._synthetic("lc", (), status, "lifecycle", data))
        return out


def _tool_text(output: Any) -> str:
    """Return a tool's result as the text of its mirrored message (a ToolMessage's text, else the output as JSON)."""
    if isinstance(output, BaseMessage):
        return str(output.text)
    if isinstance(output, str) or output is None:
        return output or ""
    return json.dumps(serialize(output), default=str)


def _from_chat_model(message: BaseMessage, metadata: Any) -> bool:
    """Tell what a chat model said from the other messages a node returns.

    A chat model's run carries ``ls_model_type: "chat"`` in its metadata; a
    node's carries ``ls_integration: "langgraph"``. A model's answer that
    reaches the stream only as its node's output (a model driven through
    ``astream_events(version="v3")`` alongside another callback handler, the
    run's journal, fires no callback LangGraph's handler sees) still has
    the id LangChain gives a model's output, ``lc_run-<run id>``.
    """
    if isinstance(metadata, dict) and (
        metadata.get("ls_model_type") == "chat" or metadata.get("ls_integration") == "langchain_chat_model"
    ):
        return True
    return message.type == "ai" and isinstance(message.id, str) and message.id.startswith(LC_ID_PREFIX)


def _without_interrupt(update: Any) -> Any:
    return {k: v for k, v in update.items() if k != "__interrupt__"} if isinstance(update, dict) else update


def _checkpoint_id(config: Any) -> str | None:
    return ((config or {}).get("configurable") or {}).get("checkpoint_id")


def _checkpoint(data: dict[str, Any]) -> dict[str, Any]:
    metadata = data.get("metadata") or {}
    return {
        "id": _checkpoint_id(data.get("config")),
        "parent_id": _checkpoint_id(data.get("parent_config")),
        "step": metadata.get("step"),
        "source": metadata.get("source"),
    }


def terminal_status(*, run_status: str, pending_interrupt: bool) -> str:
    """Map a run's outcome onto the root terminal lifecycle event."""
    if run_status == "success":
        return "interrupted" if pending_interrupt else "completed"
    if run_status == "interrupted":
        return "interrupted"
    return "failed"
