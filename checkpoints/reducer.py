"""The batch reducer behind the delta ``messages`` channel.

``DeltaChannel`` calls ``reducer(state, [write1, write2, ...])`` and may replay
stored writes in batches of any size, so the reducer must equal ``add_messages``
folded write by write and be batching-invariant. LangGraph's private delta
reducer skips part of ``add_messages`` (remove-all, strict unknown-id removal,
id assignment, chunk conversion), hence our own. It runs in linear time: a
fold of ``add_messages`` copies the list on every write (quadratic on replay).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    BaseMessageChunk,
    RemoveMessage,
    convert_to_messages,
    message_chunk_to_message,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES


def _coerce(messages: list[Any]) -> list[BaseMessage]:
    # A long history is all plain messages: check the few distinct types, not each item.
    if all(issubclass(t, BaseMessage) and not issubclass(t, BaseMessageChunk) for t in set(map(type, messages))):
        return messages
    return [message_chunk_to_message(m) for m in convert_to_messages(messages)]


def _with_ids(messages: list[BaseMessage]) -> list[BaseMessage]:
    for message in messages:
        if message.id is None:
            message.id = str(uuid.uuid4())
    return messages


def _last_remove_all(batch: list[BaseMessage]) -> int | None:
    cut = None
    for index, message in enumerate(batch):
        if isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES:
            cut = index
    return cut


class _MessageList:
    """A message list with id → last position, where removals blank slots until the end.

    Only ints go into the index: one list per message (the obvious id →
    positions map) made the cyclic GC dominate a 2,000-message replay
    (measured 1.7 ms per call with GC vs 0.26 ms without). Duplicate ids
    (possible only in a seed or after a remove-all) get position lists.
    """

    def __init__(self, messages: list[BaseMessage]) -> None:
        self.slots: list[BaseMessage | None] = list(messages)
        # Keyed by ``message.id`` as stored (None included, as add_messages would meet it).
        self.last: dict[str | None, int] = {message.id: index for index, message in enumerate(messages)}
        self.duplicates: dict[str | None, list[int]] = {}
        if len(self.last) != len(self.slots):
            for index, message in enumerate(messages):
                self.duplicates.setdefault(message.id, []).append(index)
            self.duplicates = {k: v for k, v in self.duplicates.items() if len(v) > 1}

    def apply(self, batch: list[BaseMessage]) -> None:
        """Merge one write exactly as ``add_messages(current, batch)`` would."""
        to_remove: set[str | None] = set()
        for message in batch:
            existing = self.last.get(message.id)
            if existing is not None:
                if isinstance(message, RemoveMessage):
                    to_remove.add(message.id)
                else:
                    to_remove.discard(message.id)
                    self.slots[existing] = message
            elif isinstance(message, RemoveMessage):
                raise ValueError(f"Attempting to delete a message with an ID that doesn't exist ('{message.id}')")
            else:
                self.last[message.id] = len(self.slots)
                self.slots.append(message)
        for message_id in to_remove:
            last = self.last.pop(message_id)
            for index in self.duplicates.pop(message_id, [last]):
                self.slots[index] = None

    def values(self) -> list[BaseMessage]:
        return [m for m in self.slots if m is not None]


def merge_message_writes(state: Sequence[Any] | None, writes: Sequence[Any]) -> list[BaseMessage]:
    """Fold ``writes`` into ``state`` with ``add_messages`` semantics, in one pass."""
    current = _MessageList(_with_ids(_coerce(list(state or []))))
    for write in writes:
        if write is None:
            raise ValueError("Cannot apply a None write to messages")
        batch = _with_ids(_coerce(write if isinstance(write, list) else [write]))
        cut = _last_remove_all(batch)
        if cut is not None:
            current = _MessageList(batch[cut + 1 :])
            continue
        current.apply(batch)
    return current.values()


def stored_messages(value: Any) -> list[BaseMessage]:
    """Return ``value`` as ``add_messages`` stores it in an empty channel: message objects with ids.

    A string, a dict, a ``(role, content)`` pair or a message is one message;
    a list holds any of them; None is the empty list (what ``DeltaChannel``
    makes of ``Overwrite(None)``). Raise ``ValueError`` naming what cannot
    become a message.
    """
    if value is None:
        return []
    try:
        return merge_message_writes([], [value])
    except (ValueError, TypeError, NotImplementedError) as exc:
        # pydantic's ValidationError is a ValueError; NotImplementedError is
        # what convert_to_messages raises for an unsupported type.
        raise ValueError(str(exc) or type(exc).__name__) from exc


def _stamp_our_channels(original):
    """Wrap LangGraph's ``ensure_message_ids`` so our delta channels get ids at write time.

    A ``DeltaChannel`` replays its saved writes on every read, so a message
    saved without an id would get a new uuid4 on every read (nothing could
    target it, and two reads of one checkpoint would differ). LangGraph stamps
    ids into every message-like write (messages, dicts, ``(role, content)``
    tuples, strings) only when the channel's reducer is its own
    ``_messages_delta_reducer``; for other reducers only message objects and
    message dicts. Ours has ``add_messages`` semantics, so it gets the full
    treatment too, before the writes are saved.
    """
    from langgraph.channels.delta import DeltaChannel
    from langgraph.pregel._messages import _with_message_ids

    def ensure_message_ids(channels, writes) -> None:
        for index, (channel, value) in enumerate(writes):
            spec = channels.get(channel)
            if isinstance(spec, DeltaChannel) and spec.reducer is merge_message_writes:
                stamped = _with_message_ids(value)
                if stamped is not value:
                    writes[index] = (channel, stamped)
        original(channels, writes)

    ensure_message_ids.__wrapped__ = original
    return ensure_message_ids


def install_write_time_message_ids() -> None:
    """Install the wrapper where LangGraph's loop looks the function up (idempotent).

    langgraph is pinned exactly (pyproject.toml); a test asserts the wrapper is
    in place, so an upgrade that moves the hook fails loudly, not silently.
    """
    from langgraph.pregel import _loop, main

    for module in (_loop, main):
        # Read and set by name: both modules import it privately, so their types do not export it.
        current = getattr(module, "ensure_message_ids")  # noqa: B009
        if getattr(current, "__wrapped__", None) is None:
            setattr(module, "ensure_message_ids", _stamp_our_channels(current))  # noqa: B010
