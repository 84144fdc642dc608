"""A run's persisted events as a timeline grouped per model call and tool call.

Temporal's web UI groups an activity's scheduled/started/completed events
into one row group; our journal records completions (the model's response,
the tool's result), so a group here is one model call (its response, with
latency, caller and tokens) or one tool call (the call the model asked for
and the result that answered it), in the order they began.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runs.models import Run, RunEvent

TIMELINE_CAP = 500
PREVIEW_CHARS = 160


@dataclass
class TimelineRow:
    """One event: when (from the run's first event and from the previous one) and what."""

    seq: int
    offset_ms: int
    delta_ms: int
    event_type: str
    category: str
    preview: str


@dataclass
class TimelineGroup:
    kind: str  # "run" | "input" | "model call" | "tool call" | "webhook"
    title: str
    rows: list[TimelineRow] = field(default_factory=list)


@dataclass
class Timeline:
    groups: list[TimelineGroup]
    count: int
    capped: bool


def content_preview(content: Any) -> str:
    """Return a one-line preview: a message's text (and tool calls), else compact JSON."""
    if content is None:
        return ""
    if isinstance(content, dict) and "content" in content and "type" in content:
        text = content["content"]
        if not isinstance(text, str):
            blocks = text if isinstance(text, list) else [text]
            text = " ".join(b.get("text", f"[{b.get('type')}]") if isinstance(b, dict) else str(b) for b in blocks)
        calls = ", ".join(f"{c.get('name')}()" for c in content.get("tool_calls") or [])
        text = f"{text} → {calls}" if calls else text
    elif isinstance(content, str):
        text = content
    else:
        text = json.dumps(content, separators=(",", ":"), default=str)
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _model_call_title(event: RunEvent, index: int) -> str:
    meta = event.metadata or {}
    usage = meta.get("usage") or {}
    parts = [f"model call #{meta.get('llm_call_index', index)}", str(meta.get("caller") or "lead_agent")]
    if meta.get("latency_ms") is not None:
        parts.append(f"{meta['latency_ms']} ms")
    if usage.get("total_tokens") is not None:
        parts.append(f"{usage['total_tokens']} tokens")
    return " · ".join(parts)


def _webhook_title(event: RunEvent) -> str:
    content = event.content if isinstance(event.content, dict) else {}
    answer = f"HTTP {content['status_code']}" if content.get("status_code") is not None else content.get("error")
    verdict = "delivered" if event.event_type == "webhook.sent" else "not delivered"
    attempts = content.get("attempts") or 1
    return f"webhook {content.get('url', '')} · {verdict} · {answer} · {attempts} attempt{'s' if attempts != 1 else ''}"


def group_events(events: list[RunEvent]) -> list[TimelineGroup]:
    """Group events in seq order; a tool result joins the group of the call it answers."""
    groups: list[TimelineGroup] = []
    tool_groups: dict[str, TimelineGroup] = {}
    if not events:
        return groups
    start = previous = events[0].created_at
    model_calls = 0
    for event in events:
        row = TimelineRow(
            seq=event.seq,
            offset_ms=round((event.created_at - start).total_seconds() * 1000),
            delta_ms=round((event.created_at - previous).total_seconds() * 1000),
            event_type=event.event_type,
            category=event.category,
            preview=content_preview(event.content),
        )
        previous = event.created_at
        content = event.content if isinstance(event.content, dict) else {}
        if event.event_type == "llm.ai.response":
            groups.append(TimelineGroup("model call", _model_call_title(event, model_calls), [row]))
            model_calls += 1
            for call in content.get("tool_calls") or []:
                group = TimelineGroup("tool call", f"tool call {call.get('name')} ({call.get('id')})")
                tool_groups[str(call.get("id"))] = group
                groups.append(group)
        elif event.event_type == "llm.tool.result" and str(content.get("tool_call_id")) in tool_groups:
            tool_groups.pop(str(content.get("tool_call_id"))).rows.append(row)
        elif event.event_type == "llm.tool.result":
            groups.append(TimelineGroup("tool call", f"tool result ({content.get('name') or 'unknown call'})", [row]))
        elif event.event_type == "llm.error":
            groups.append(TimelineGroup("model call", f"model call #{model_calls} failed", [row]))
        elif event.event_type == "llm.human.input":
            groups.append(TimelineGroup("input", "input", [row]))
        elif event.category == "webhook":
            groups.append(TimelineGroup("webhook", _webhook_title(event), [row]))
        else:
            groups.append(TimelineGroup("run", event.event_type, [row]))
    return [group for group in groups if group.rows or group.kind == "tool call"]


def run_timeline(*, run: Run, cap: int = TIMELINE_CAP) -> Timeline:
    """Return the first ``cap`` events of the run, grouped (one query)."""
    events = list(RunEvent.objects.filter(thread_id=run.thread_id, run=run).order_by("seq")[: cap + 1])
    capped = len(events) > cap
    events = events[:cap]
    return Timeline(group_events(events), len(events), capped)
