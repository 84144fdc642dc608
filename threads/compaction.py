"""Manual context compaction: fold a thread's older messages into a summary, keep the recent ones.

A compactor decides what to keep and how to summarize; this module reads
the head, asks it, and writes the result through the state-only mutation
graph as ``manual_compaction`` (``messages`` replaced, not appended) under
the checkpoint-write reservation. Which compactor runs is configuration
(``context.compactor``): the deterministic built-in one (no LLM, so
compaction works in every deployment), the served graph's
``compact_context`` attribute, or a callable named by import path.

The summary goes to a ``summary_text`` channel when the graph has one (as
DeerFlow's thread state does); otherwise it leads the kept messages as a
hidden human message, which the next compaction folds in again.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Protocol

from django.conf import settings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.utils.uuid import uuid7

from checkpoints.accessor import state_accessor
from checkpoints.graphs import UPDATE, load_graph, resolve_graph
from core.errors import Conflict, Unavailable
from threads.models import ThreadMeta
from threads.services import checkpoint_write_reserved, thread_mark_state_updated

COMPACTION_NODE = "manual_compaction"
SUMMARY_CHANNEL = "summary_text"
SUMMARY_SOURCE = "summarization"
SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
# The built-in summary: one line per folded message, each cut to this many characters, the whole to the cap.
SUMMARY_LINE_CHARS = 200
SUMMARY_MAX_CHARS = 4000
REFUSAL = "Thread has a run in flight. Compact after the run finishes."

KeepKind = Literal["messages", "tokens", "fraction"]


@dataclass(frozen=True)
class Keep:
    """How much recent context survives a compaction (DeerFlow's ``ContextSize``)."""

    type: KeepKind
    value: float


@dataclass(frozen=True)
class Compaction:
    """A compactor's answer: the messages kept, those folded away, and the summary that replaces them."""

    preserved: list[BaseMessage]
    removed: list[BaseMessage]
    summary: str


class Compactor(Protocol):
    def __call__(
        self, messages: list[BaseMessage], *, keep: Keep, force: bool, summary: str | None, model_name: str | None
    ) -> Compaction | None: ...


def _text(message: BaseMessage) -> str:
    return " ".join(message.text.split())


def _cut_for(messages: Sequence[BaseMessage], keep: Keep) -> int:
    """Return the index of the first kept message under ``keep``."""
    if keep.type == "messages":
        return max(0, len(messages) - int(keep.value))
    budget = keep.value
    if keep.type == "fraction":
        budget = keep.value * count_tokens_approximately(messages)
    cut = len(messages)
    while cut > 0 and count_tokens_approximately(messages[cut - 1 :]) <= budget:
        cut -= 1
    return cut


def _safe_cut(messages: Sequence[BaseMessage], cut: int) -> int:
    """Move the cut back so no kept tool result loses the AI message that called it."""
    while 0 < cut < len(messages) and isinstance(messages[cut], ToolMessage):
        cut -= 1
    return cut


def builtin_compactor(
    messages: list[BaseMessage], *, keep: Keep, force: bool, summary: str | None, model_name: str | None
) -> Compaction | None:
    """Keep the recent messages; summarize the others as one line each ("User: …", "Assistant: …").

    Deterministic and model-free. ``force`` and ``model_name`` are for
    compactors that call a model; this one always compacts what ``keep``
    leaves out, and answers None when that is nothing.
    """
    cut = _safe_cut(messages, _cut_for(messages, keep))
    removed = messages[:cut]
    if not removed:
        return None
    lines = [summary] if summary else []
    for message in removed:
        if isinstance(message, (HumanMessage, AIMessage)) and (text := _text(message)):
            role = "User" if isinstance(message, HumanMessage) else "Assistant"
            lines.append(f"{role}: {text[:SUMMARY_LINE_CHARS]}")
    text = "\n".join(lines)
    if len(text) > SUMMARY_MAX_CHARS:
        text = text[-SUMMARY_MAX_CHARS:]
    return Compaction(preserved=list(messages[cut:]), removed=list(removed), summary=text)


@cache
def _imported(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def thread_compactor(thread: ThreadMeta) -> Compactor:
    """Return the configured compactor for the thread's graph; refuse (409) when compaction is off."""
    config = settings.DEERFLOW_CONFIG.context
    if not config.compaction_enabled:
        raise Conflict("Context compaction is disabled.")
    if config.compactor == "builtin":
        return builtin_compactor
    if config.compactor == "graph":
        target = load_graph(resolve_graph(thread.assistant_id).import_path).target
        return getattr(target, "compact_context", None) or builtin_compactor
    try:
        return _imported(config.compactor)
    except (ImportError, AttributeError) as exc:
        raise Unavailable(f"Context compactor {config.compactor!r} cannot be loaded: {exc}", status=500) from exc


def _is_summary(message: BaseMessage) -> bool:
    return (message.additional_kwargs or {}).get("lc_source") == SUMMARY_SOURCE


def _summary_message(summary: str) -> HumanMessage:
    return HumanMessage(
        content=SUMMARY_PREFIX + summary,
        id=str(uuid7()),
        additional_kwargs={"lc_source": SUMMARY_SOURCE, "hide_from_ui": True},
    )


def _previous_summary(values: dict[str, Any], messages: list[BaseMessage], in_channel: bool) -> str | None:
    if in_channel:
        return values.get(SUMMARY_CHANNEL) or None
    if messages and _is_summary(messages[0]):
        return messages[0].text.removeprefix(SUMMARY_PREFIX)
    return None


def _result(thread_id: str, compacted: bool, **fields: Any) -> dict[str, Any]:
    """Return DeerFlow's ``ThreadCompactResponse`` shape."""
    return {
        "thread_id": thread_id,
        "compacted": compacted,
        "reason": fields.get("reason"),
        "removed_message_count": fields.get("removed", 0),
        "preserved_message_count": fields.get("preserved", 0),
        "summary_updated": compacted,
        "checkpoint_id": fields.get("checkpoint_id"),
        "total_tokens": fields.get("total_tokens", 0),
    }


def thread_compact(
    *, thread: ThreadMeta, keep: Keep | None = None, force: bool = True, model_name: str | None = None
) -> dict[str, Any]:
    """Compact the thread's head context; answer what was removed and kept.

    ``total_tokens`` is the approximate size of the context before
    compaction. Nothing to fold away: ``compacted`` is false with
    ``reason: "not_enough_messages"`` and no checkpoint is written.
    """
    compactor = thread_compactor(thread)
    keep = keep or Keep("messages", settings.DEERFLOW_CONFIG.context.keep_messages)
    accessor = state_accessor(thread.assistant_id, access=UPDATE)
    with checkpoint_write_reserved(thread_id=thread.thread_id, refusal=REFUSAL):
        values = accessor.get(thread.thread_id).values or {}
        messages = [m for m in values.get("messages") or [] if isinstance(m, BaseMessage)]
        in_channel = SUMMARY_CHANNEL in accessor.writable_channels()
        previous = _previous_summary(values, messages, in_channel)
        if previous is not None and not in_channel:
            messages = messages[1:]
        total_tokens = count_tokens_approximately(messages)
        try:
            compaction = compactor(messages, keep=keep, force=force, summary=previous, model_name=model_name)
        except Exception as exc:
            raise Unavailable("Failed to compact thread context.", status=500) from exc
        if compaction is None:
            return _result(thread.thread_id, False, reason="not_enough_messages", total_tokens=total_tokens)
        update: dict[str, Any] = {"messages": compaction.preserved}
        if in_channel:
            update[SUMMARY_CHANNEL] = compaction.summary
        else:
            update["messages"] = [_summary_message(compaction.summary), *compaction.preserved]
        config = accessor.update(thread.thread_id, update, as_node=COMPACTION_NODE)
    thread_mark_state_updated(thread_id=thread.thread_id, messages=True)
    return _result(
        thread.thread_id,
        True,
        removed=len(compaction.removed),
        preserved=len(compaction.preserved),
        checkpoint_id=config["configurable"]["checkpoint_id"],
        total_tokens=total_tokens,
    )
