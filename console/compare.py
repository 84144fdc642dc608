"""Two runs or two threads side by side: inputs, outcomes, messages, tokens and durations.

"Why did this answer differ from that one?" is answered by putting the two
next to each other: two turns (a retry, a fork, the same question on two
threads) or two whole threads (a branch and the thread it came from).
Messages are aligned by position and each row says whether both sides
agree, so the first divergence is the first row marked as differing.
Runs read their rows and message events (two queries); threads read each
head through the accessor, as the thread page does.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse

from console.turns import Turn, TurnStats, thread_turn_stats, turn_of
from runs.models import Run, RunEvent
from threads.conversation import Conversation, thread_conversation
from threads.models import ThreadMeta

# Enough for a long turn; the messages past it are counted, not shown.
MESSAGES_PER_RUN = 100
TEXT_SHOWN = 2000


@dataclass(frozen=True)
class Line:
    """One message on one side: its role and text (tool calls as ``name(args)``)."""

    role: str
    text: str


@dataclass(frozen=True)
class Row:
    """The messages at one position on both sides; ``same`` when role and text agree."""

    left: Line | None
    right: Line | None

    @property
    def same(self) -> bool:
        return self.left == self.right


def aligned(left: list[Line], right: list[Line]) -> tuple[list[Row], int | None]:
    """Pair the two message lists by position; return the rows and the 1-based position of the first difference."""
    rows = [Row(a, b) for a, b in zip_longest(left, right)]
    first = next((index for index, row in enumerate(rows, start=1) if not row.same), None)
    return rows, first


def _event_line(content: Any) -> Line | None:
    if not isinstance(content, dict):
        return None
    body = content.get("content")
    text = (
        body if isinstance(body, str) else " ".join(str(b.get("text", "")) for b in body or [] if isinstance(b, dict))
    )
    calls = [f"{c.get('name')}({c.get('args')})" for c in content.get("tool_calls") or [] if isinstance(c, dict)]
    return Line(str(content.get("type", "")), " ".join(part for part in (text.strip(), *calls) if part)[:TEXT_SHOWN])


def run_messages(run_ids: list[str]) -> dict[str, list[Line]]:
    """Return each run's journalled messages (input, answers, tool results) in order, one query for all runs."""
    lines: dict[str, list[Line]] = {run_id: [] for run_id in run_ids}
    events = RunEvent.objects.filter(run_id__in=run_ids, category="message").order_by("seq")
    for run_id, content in events.values_list("run_id", "content").iterator():
        line = _event_line(content)
        if line is not None and len(lines[run_id]) < MESSAGES_PER_RUN:
            lines[run_id].append(line)
    return lines


def _conversation_lines(conversation: Conversation) -> list[Line]:
    lines = []
    for message in conversation.messages:
        calls = [f"{call.name}({call.args})" for call in message.tool_calls]
        lines.append(Line(message.role, " ".join(part for part in (message.text, *calls) if part)[:TEXT_SHOWN]))
    return lines


@dataclass
class ThreadSide:
    """One thread of a comparison: its row, figures over its turns and its conversation at the head."""

    thread: ThreadMeta
    stats: TurnStats
    conversation: Conversation


def _pair(request, key: str) -> list[str]:
    ids = [value for value in request.GET.getlist(key) if value][:3]
    return ids if len(ids) == 2 else []


def _compare_runs(request, run_ids: list[str]) -> dict[str, Any]:
    if not request.user.has_perm("runs.view_run"):
        raise PermissionDenied("Comparing runs needs the runs.view_run permission.")
    runs = Run.objects.in_bulk(run_ids)
    if len(runs) != 2:
        raise Http404("Both runs must exist.")
    turns: list[Turn] = [turn_of(runs[run_id], 0) for run_id in run_ids]
    context: dict[str, Any] = {"kind": "runs", "sides": turns, "messages_shown": False}
    if request.user.has_perm("runs.view_runevent"):
        lines = run_messages(run_ids)
        context["rows"], context["first_difference"] = aligned(lines[run_ids[0]], lines[run_ids[1]])
        context["messages_shown"] = True
    return context


def _compare_threads(thread_ids: list[str]) -> dict[str, Any]:
    threads = ThreadMeta.objects.select_related("owner").in_bulk(thread_ids)
    if len(threads) != 2:
        raise Http404("Both threads must exist.")
    sides = [
        ThreadSide(threads[i], thread_turn_stats(thread_id=i), thread_conversation(thread=threads[i]))
        for i in thread_ids
    ]
    rows, first = aligned(*(_conversation_lines(side.conversation) for side in sides))
    return {"kind": "threads", "sides": sides, "rows": rows, "first_difference": first, "messages_shown": True}


def compare_view(request, context: dict[str, Any]) -> TemplateResponse:
    """Render the comparison the query asks for, or how to ask for one."""
    if run_ids := _pair(request, "run"):
        context.update(_compare_runs(request, run_ids))
    elif thread_ids := _pair(request, "thread"):
        context.update(_compare_threads(thread_ids))
    context["title"] = f"Compare {context['kind']}" if "kind" in context else "Compare"
    return TemplateResponse(request, "admin/threads/compare.html", context)
