"""The import's proof: every thread's state and history here equal what the source's checkpoints hold.

Our side is read by the code the API answers with (the state accessor's
encoded state and history, as ``GET /state`` and ``POST /history`` return
them); the source side by a minimal graph compiled over the source's own
saver, with LangGraph's ``add_messages`` for full-mode threads and a
``DeltaChannel`` for delta-mode ones. Compared: each checkpoint's id and its
messages' ids, types and text, newest first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, TypedDict

import orjson
from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.message import add_messages
from langgraph.pregel import Pregel

from checkpoints.accessor import state_accessor
from checkpoints.modes import metadata_uses_delta
from checkpoints.reducer import merge_message_writes
from threads.models import ThreadMeta

# Threads read per query: well under SQLite's limit of bound parameters.
VERIFY_CHUNK = 500
MessageKey = tuple[str | None, str, str]
StateKey = tuple[str | None, list[MessageKey]]


class _FullState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class _DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(merge_message_writes)]


@dataclass
class Verification:
    """How many imported threads matched their source, and why the others did not."""

    checked: int = 0
    matched: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.checked == self.matched


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content).strip()
    return str(content)


def _message_key(message: Any) -> MessageKey:
    if isinstance(message, BaseMessage):
        return message.id, message.type, _text(message.content)
    return message.get("id"), message.get("type", ""), _text(message.get("content"))


def _messages(values: Any) -> list[MessageKey]:
    messages = values.get("messages") if isinstance(values, Mapping) else None
    return [_message_key(m) for m in messages or ()]


@cache
def _reader_builder(delta: bool) -> StateGraph:
    builder = StateGraph(_DeltaState if delta else _FullState)
    builder.add_node("read", lambda state: {})
    builder.set_entry_point("read")
    builder.set_finish_point("read")
    return builder


def source_reader(saver: BaseCheckpointSaver, *, delta: bool) -> Pregel:
    """Return a graph that materializes the source's ``messages`` in the thread's channel mode."""
    return _reader_builder(delta).compile(checkpointer=saver)


def source_states(saver: BaseCheckpointSaver, thread_id: str) -> tuple[StateKey, list[StateKey]]:
    """Return the source thread's head and history (root namespace), as compared keys."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    delta = any(metadata_uses_delta(item.metadata) for item in saver.list(config))
    graph = source_reader(saver, delta=delta)
    head = graph.get_state(config)
    history = [
        (s.config["configurable"]["checkpoint_id"], _messages(s.values)) for s in graph.get_state_history(config)
    ]
    return ((head.config or {}).get("configurable", {}).get("checkpoint_id"), _messages(head.values)), history


def our_states(thread: ThreadMeta, *, limit: int) -> tuple[StateKey, list[StateKey]]:
    """Return the thread's head and history as our state and history routes answer them."""
    accessor = state_accessor(thread.assistant_id)
    state = orjson.loads(accessor.encoded_state(thread.thread_id))
    history = orjson.loads(b"".join(accessor.encoded_history(thread.thread_id, limit=max(limit, 1))))
    head_id = (state.get("checkpoint") or {}).get("checkpoint_id")
    entries = [((e.get("checkpoint") or {}).get("checkpoint_id"), _messages(e.get("values"))) for e in history]
    return (head_id, _messages(state.get("values"))), entries


def _difference(source: list[StateKey], ours: list[StateKey]) -> str:
    if len(source) != len(ours):
        return f"history has {len(ours)} states here, {len(source)} in the source"
    for (source_id, source_messages), (our_id, our_messages) in zip(source, ours, strict=True):
        if source_id != our_id:
            return f"history differs at checkpoint {source_id} (here {our_id})"
        if source_messages != our_messages:
            return f"messages differ at checkpoint {source_id}"
    return ""


def thread_verify(saver: BaseCheckpointSaver, thread: ThreadMeta) -> str:
    """Return why the thread differs from its source (empty when equal)."""
    source_head, source_history = source_states(saver, thread.thread_id)
    try:
        our_head, our_history = our_states(thread, limit=len(source_history) + 1)
    except Exception as exc:  # any refusal (a mode mismatch, an unreadable state) is this thread's failure
        return f"{type(exc).__name__}: {exc}"
    if our_head != source_head:
        return "head state differs"
    return _difference(source_history, our_history)


def threads_verify(
    saver: BaseCheckpointSaver, thread_ids: Iterable[str], *, progress: Callable[[int], None] | None = None
) -> Verification:
    """Compare every listed thread that is here with its source."""
    result = Verification()
    ids = sorted(thread_ids)
    for start in range(0, len(ids), VERIFY_CHUNK):
        for thread in ThreadMeta.objects.filter(pk__in=ids[start : start + VERIFY_CHUNK]).order_by("pk"):
            result.checked += 1
            if problem := thread_verify(saver, thread):
                result.failures.append(f"{thread.thread_id}: {problem}")
            else:
                result.matched += 1
            if progress:
                progress(result.checked)
    return result
