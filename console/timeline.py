"""A run's persisted events as a timeline grouped per model call and tool call, with a waterfall.

Temporal's web UI groups an activity's scheduled/started/completed events
into one row group; our journal records completions (the model's response,
the tool's result), so a group here is one model call (its response, with
latency, caller and tokens) or one tool call (the call the model asked for
and the result that answered it), in the order they began. Each group is a
bar on the run's time axis (Inngest's and Langfuse's waterfall): a model
call spans its latency up to its response, a tool call from the response
that asked for it to its result; other events are instants.
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
    """Events that belong together, and the span of time they cover (milliseconds from the first event)."""

    kind: str  # "run" | "input" | "model call" | "tool call" | "webhook" | "failure"
    title: str
    rows: list[TimelineRow] = field(default_factory=list)
    start_ms: int = 0
    end_ms: int = 0

    def close_at(self, offset_ms: int) -> None:
        self.end_ms = max(self.end_ms, offset_ms)


@dataclass
class Timeline:
    groups: list[TimelineGroup]
    count: int
    capped: bool

    @property
    def span_ms(self) -> int:
        return max((g.end_ms for g in self.groups), default=0)

    def bars(self) -> list[tuple[TimelineGroup, float, float]]:
        """Return each group with its bar's left edge and width, in percent of the run's span."""
        span = self.span_ms or 1
        return [(g, 100 * g.start_ms / span, 100 * (g.end_ms - g.start_ms) / span) for g in self.groups]


@dataclass(frozen=True)
class Failure:
    """Why a run failed, as its journal kept it (``runs.services.outcome.failure_details``)."""

    name: str
    message: str
    node: str | None = None
    traceback: str = ""
    checkpoint_id: str | None = None


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


def _row(event: RunEvent, start, previous) -> TimelineRow:
    return TimelineRow(
        seq=event.seq,
        offset_ms=round((event.created_at - start).total_seconds() * 1000),
        delta_ms=round((event.created_at - previous).total_seconds() * 1000),
        event_type=event.event_type,
        category=event.category,
        preview=content_preview(event.content),
    )


def _group(kind: str, title: str, row: TimelineRow, *, began_ms: int | None = None) -> TimelineGroup:
    start = row.offset_ms if began_ms is None else max(0, began_ms)
    return TimelineGroup(kind, title, [row], start_ms=start, end_ms=row.offset_ms)


def _failure_title(event: RunEvent) -> str:
    content = event.content if isinstance(event.content, dict) else {}
    where = f" in {content['node']}" if content.get("node") else ""
    return f"failed: {content.get('name') or 'error'}{where}"


def group_events(events: list[RunEvent]) -> list[TimelineGroup]:
    """Group events in seq order; a tool result joins the group of the call it answers."""
    groups: list[TimelineGroup] = []
    tool_groups: dict[str, TimelineGroup] = {}
    if not events:
        return groups
    start = previous = events[0].created_at
    model_calls = 0
    for event in events:
        row = _row(event, start, previous)
        previous = event.created_at
        content = event.content if isinstance(event.content, dict) else {}
        if event.event_type == "llm.ai.response":
            latency = (event.metadata or {}).get("latency_ms")
            began = row.offset_ms - round(latency) if isinstance(latency, (int, float)) else None
            groups.append(_group("model call", _model_call_title(event, model_calls), row, began_ms=began))
            model_calls += 1
            for call in content.get("tool_calls") or []:
                group = TimelineGroup("tool call", f"tool call {call.get('name')} ({call.get('id')})")
                group.start_ms = group.end_ms = row.offset_ms
                tool_groups[str(call.get("id"))] = group
                groups.append(group)
        elif event.event_type == "llm.tool.result" and str(content.get("tool_call_id")) in tool_groups:
            group = tool_groups.pop(str(content.get("tool_call_id")))
            group.rows.append(row)
            group.close_at(row.offset_ms)
        elif event.event_type == "llm.tool.result":
            groups.append(_group("tool call", f"tool result ({content.get('name') or 'unknown call'})", row))
        elif event.event_type == "llm.error":
            groups.append(_group("model call", f"model call #{model_calls} failed", row))
        elif event.event_type == "llm.human.input":
            groups.append(_group("input", "input", row))
        elif event.event_type == "run.error":
            groups.append(_group("failure", _failure_title(event), row))
        elif event.category == "webhook":
            groups.append(_group("webhook", _webhook_title(event), row))
        else:
            groups.append(_group("run", event.event_type, row))
    return [group for group in groups if group.rows or group.kind == "tool call"]


def run_timeline(*, run: Run, cap: int = TIMELINE_CAP) -> Timeline:
    """Return the first ``cap`` events of the run, grouped (one query)."""
    events = list(RunEvent.objects.filter(thread_id=run.thread_id, run=run).order_by("seq")[: cap + 1])
    capped = len(events) > cap
    events = events[:cap]
    return Timeline(group_events(events), len(events), capped)


def run_failure(*, run: Run) -> Failure | None:
    """Return the failure the run's journal recorded (its last ``run.error``), or None (one query)."""
    event = (
        RunEvent.objects.filter(thread_id=run.thread_id, run=run, event_type="run.error")
        .order_by("-seq")
        .only("content")
        .first()
    )
    content = event.content if event is not None and isinstance(event.content, dict) else None
    if content is None:
        return None
    return Failure(
        name=str(content.get("name") or "Error"),
        message=str(content.get("message") or ""),
        node=content.get("node"),
        traceback=str(content.get("traceback") or ""),
        checkpoint_id=content.get("checkpoint_id"),
    )
