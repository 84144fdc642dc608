"""What changed between two materialized states: messages by id, other channels old → new.

Both sides come from the accessor (the mode gate has passed for both), so a
delta checkpoint is compared on its full message list, never on its writes.
Previews are text only: an image block shows as ``[image <type>, <n> bytes]``
and a ``data:`` URL is never inlined into the page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREVIEW_CHARS = 300


def _image_placeholder(url: str) -> str:
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[5:].split(";")[0] or "unknown"
        return f"[image {media}, {len(data) * 3 // 4} bytes]"
    return f"[image {url[:80]}]"


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return str(block)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "image_url":
        url = block.get("image_url")
        return _image_placeholder(url.get("url", "") if isinstance(url, Mapping) else str(url or ""))
    if kind == "image":
        data = block.get("data") or block.get("base64") or ""
        if data:
            return f"[image {block.get('mime_type', 'unknown')}, {len(data) * 3 // 4} bytes]"
        return _image_placeholder(str(block.get("url", "")))
    return f"[{kind or 'block'}]"


def content_text(content: Any) -> str:
    """Return a message content as plain text, images as placeholders."""
    if isinstance(content, list):
        return " ".join(_block_text(block) for block in content)
    return _block_text(content)


def short(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class MessageView:
    """A message as the console shows it: who, what, tool calls, hidden or not."""

    id: str
    type: str
    text: str
    tool_calls: list[str] = field(default_factory=list)
    tool_call_id: str = ""
    hidden: bool = False

    @classmethod
    def of(cls, message: Any, index: int) -> MessageView:
        extra = getattr(message, "additional_kwargs", None) or {}
        return cls(
            id=str(getattr(message, "id", None) or f"#{index}"),
            type=str(getattr(message, "type", type(message).__name__)),
            text=short(content_text(getattr(message, "content", message))),
            tool_calls=[str(call.get("name", "?")) for call in getattr(message, "tool_calls", None) or []],
            tool_call_id=str(getattr(message, "tool_call_id", "") or ""),
            hidden=bool(extra.get("hide_from_ui") or extra.get("hidden")),
        )

    def signature(self) -> tuple:
        return (self.type, self.text, tuple(self.tool_calls), self.tool_call_id, self.hidden)


@dataclass
class ChannelChange:
    channel: str
    old: str
    new: str


@dataclass
class StateDiff:
    """Messages added, removed and changed (by id), other channels changed."""

    added: list[MessageView] = field(default_factory=list)
    removed: list[MessageView] = field(default_factory=list)
    changed: list[tuple[MessageView, MessageView]] = field(default_factory=list)
    channels: list[ChannelChange] = field(default_factory=list)

    @property
    def changed_count(self) -> int:
        """Messages changed under their id plus other channels changed."""
        return len(self.changed) + len(self.channels)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.channels)


def message_views(messages: Any) -> list[MessageView]:
    return [MessageView.of(message, index) for index, message in enumerate(messages or [])]


def _value_text(value: Any) -> str:
    if value is None:
        return "∅"
    if isinstance(value, str):
        return short(repr(value))
    try:
        return short(json.dumps(value, default=str, sort_keys=True))
    except (TypeError, ValueError):
        return short(repr(value))


def state_diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> StateDiff:
    """Compare two materialized ``values`` dicts (``old`` is the base)."""
    old, new = dict(old or {}), dict(new or {})
    diff = StateDiff()
    before = {view.id: view for view in message_views(old.pop("messages", None))}
    after = {view.id: view for view in message_views(new.pop("messages", None))}
    diff.added = [view for key, view in after.items() if key not in before]
    diff.removed = [view for key, view in before.items() if key not in after]
    diff.changed = [
        (before[key], view)
        for key, view in after.items()
        if key in before and before[key].signature() != view.signature()
    ]
    for channel in sorted(set(old) | set(new)):
        if old.get(channel) != new.get(channel):
            diff.channels.append(ChannelChange(channel, value_text(old.get(channel)), value_text(new.get(channel))))
    return diff


def value_text(value: Any) -> str:
    """Return a channel value as one short line (messages as their text)."""
    if isinstance(value, list) and value and all(hasattr(item, "content") for item in value):
        return short(" | ".join(f"{item.type}: {content_text(item.content)}" for item in value))
    if hasattr(value, "content") and hasattr(value, "type"):
        return short(f"{value.type}: {content_text(value.content)}")
    return _value_text(value)


def write_preview(value: Any) -> str:
    """Return a pending write's value as one short line."""
    return value_text(value)
