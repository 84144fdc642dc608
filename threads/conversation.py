"""A thread's conversation as support staff read it: roles, text, tool calls with their results.

Built from the latest state read through the accessor (``thread_conversation``),
so delta threads read right and the mode gate applies. Hidden messages stay
in the list, marked; images become placeholders with their type and size, and
no ``data:`` URL ever reaches the page.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from checkpoints.accessor import state_accessor
from checkpoints.errors import CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError
from threads.models import ThreadMeta

TEXT_PREVIEW = 4000
# The page shows the latest messages; the export has them all.
MESSAGES_SHOWN = 200


@dataclass
class ToolCall:
    """A call the model asked for, with the tool's answer once it came."""

    call_id: str
    name: str
    args: Any
    result: str | None = None
    result_status: str = ""


@dataclass
class ConversationMessage:
    """One message as the console shows it."""

    message_id: str
    role: str
    text: str
    hidden: bool
    images: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    # A tool result whose call is shown above it is folded into that call.
    answers_call: str = ""


@dataclass
class Conversation:
    """The conversation at the head, or why it cannot be shown."""

    messages: list[ConversationMessage]
    values: dict[str, Any]
    checkpoint_id: str | None
    interrupts: list[Any]
    error: str = ""
    earlier: int = 0  # older messages not shown


def _data_url_size(url: str) -> tuple[str, int | None]:
    """Return (media type, decoded bytes) of a ``data:`` URL without keeping its payload."""
    header, _, payload = url[5:].partition(",")
    media_type = header.split(";")[0] or "application/octet-stream"
    if ";base64" not in header:
        return media_type, len(payload)
    try:
        return media_type, len(base64.b64decode(payload, validate=False))
    except (binascii.Error, ValueError):
        return media_type, None


def image_placeholder(block: dict[str, Any]) -> str | None:
    """Return "[image TYPE, N bytes]" for an image content block, None for other blocks."""
    kind = block.get("type")
    if kind == "image_url":
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
    elif kind == "image":
        url = block.get("url")
        data = block.get("base64") or block.get("data")
        if isinstance(data, str):
            url = f"data:{block.get('mime_type') or 'image'};base64,{data}"
    else:
        return None
    if not isinstance(url, str):
        return "[image]"
    if url.startswith("data:"):
        media_type, size = _data_url_size(url)
        return f"[image {media_type}, {size} bytes]" if size is not None else f"[image {media_type}]"
    return "[image, remote URL]"


def _text_and_images(content: Any) -> tuple[str, list[str]]:
    if isinstance(content, str):
        return content[:TEXT_PREVIEW], []
    texts, images = [], []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict):
            placeholder = image_placeholder(block)
            if placeholder is not None:
                images.append(placeholder)
            elif isinstance(block.get("text"), str):
                texts.append(block["text"])
    return " ".join(texts).strip()[:TEXT_PREVIEW], images


def conversation_messages(messages: list[BaseMessage]) -> list[ConversationMessage]:
    """Turn LangChain messages into console rows, pairing tool calls with their results."""
    rows: list[ConversationMessage] = []
    calls: dict[str, ToolCall] = {}
    for message in messages:
        text, images = _text_and_images(message.content)
        row = ConversationMessage(
            message_id=message.id or "",
            role=message.type,
            text=text,
            hidden=bool((message.additional_kwargs or {}).get("hide_from_ui")),
            images=images,
        )
        for call in getattr(message, "tool_calls", None) or []:
            tool_call = ToolCall(call_id=call.get("id") or "", name=call.get("name") or "", args=call.get("args"))
            calls[tool_call.call_id] = tool_call
            row.tool_calls.append(tool_call)
        call_id = getattr(message, "tool_call_id", None)
        if message.type == "tool" and call_id in calls:
            calls[call_id].result = text
            calls[call_id].result_status = getattr(message, "status", "") or ""
            row.answers_call = call_id
        rows.append(row)
    return rows


def thread_conversation(*, thread: ThreadMeta) -> Conversation:
    """Read the thread's head through the accessor; a gate refusal is shown, not raised."""
    try:
        snapshot = state_accessor(thread.assistant_id).get(thread.thread_id)
    except (CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError) as exc:
        return Conversation([], {}, None, [], error=f"Thread {thread.thread_id}: {exc}")
    values = dict(snapshot.values or {})
    messages = [m for m in values.pop("messages", None) or [] if isinstance(m, BaseMessage)]
    checkpoint_id = (snapshot.config or {}).get("configurable", {}).get("checkpoint_id")
    interrupts = [interrupt.value for interrupt in snapshot.interrupts]
    rows = conversation_messages(messages)
    earlier = max(0, len(rows) - MESSAGES_SHOWN)
    return Conversation(rows[earlier:], values, checkpoint_id, interrupts, earlier=earlier)
