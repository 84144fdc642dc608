"""A thread read as turns: one per run, with its input, outcome, duration, tokens and what was special about it.

Support staff ask "what happened in this conversation?" turn by turn, not
checkpoint by checkpoint: the run rows already hold each turn's input (the
request as executed), its outcome, timing and token usage, so the page
reads them in one query per page of turns and one for the thread's figures,
however long the thread.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet

from runs.models import CancelAction, Run, RunStatus
from threads.models import ThreadMeta

TURNS_PER_PAGE = 20
INPUT_PREVIEW = 300
FAILED = (RunStatus.ERROR, RunStatus.TIMEOUT)
UNFINISHED = (RunStatus.QUEUED, RunStatus.PENDING, RunStatus.RUNNING)
STATS_FIELDS = ("status", "cancel_action", "started_at", "finished_at", "token_usage_by_model", "total_tokens")


@dataclass(frozen=True)
class Badge:
    """A mark on a turn: ``kind`` is its CSS class, ``title`` the hover text."""

    kind: str
    label: str
    title: str = ""


@dataclass
class Turn:
    """One run of the thread as the thread page lists it."""

    number: int
    run: Run
    input: str
    reply: str
    duration: timedelta | None
    badges: list[Badge] = field(default_factory=list)
    # The turn before it, for a one-click comparison; "" for the first.
    previous_run_id: str = ""

    @property
    def outcome(self) -> str:
        return self.run.error if self.run.error else self.reply


@dataclass
class TurnStats:
    """A thread's figures over all its runs: how many, how fast, how many tokens per model."""

    turns: int = 0
    failed: int = 0
    rolled_back: int = 0
    p50: timedelta | None = None
    p95: timedelta | None = None
    tokens: int = 0
    tokens_by_model: dict[str, int] = field(default_factory=dict)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            b if isinstance(b, str) else str(b.get("text", "")) for b in content if isinstance(b, str | dict)
        )
    return ""


def run_input(run: Run) -> str:
    """Return what the run was asked: the journal's first human message, else the request's last message or resume."""
    if run.first_human_message:
        return run.first_human_message[:INPUT_PREVIEW]
    kwargs = run.kwargs or {}
    messages = (kwargs.get("input") or {}).get("messages") if isinstance(kwargs.get("input"), dict) else None
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return _text(messages[-1].get("content"))[:INPUT_PREVIEW]
    command = kwargs.get("command")
    if isinstance(command, dict) and "resume" in command:
        return f"resume: {command['resume']}"[:INPUT_PREVIEW]
    return ""


def run_duration(run: Run) -> timedelta | None:
    if run.started_at is None or run.finished_at is None:
        return None
    return run.finished_at - run.started_at


def run_badges(run: Run) -> list[Badge]:
    """Return what sets the run apart: resumed, forked from a checkpoint, rolled back, cancelled, failed, interrupted."""
    kwargs = run.kwargs or {}
    badges = []
    command = kwargs.get("command")
    if isinstance(command, dict) and command.get("resume") is not None:
        badges.append(Badge("resumed", "resumed", f"answered an interrupt with {command['resume']!r}"[:200]))
    if kwargs.get("checkpoint_id"):
        badges.append(Badge("forked", "forked", f"ran from checkpoint {kwargs['checkpoint_id']}"))
    if run.cancel_action == CancelAction.ROLLBACK:
        badges.append(Badge("rolled-back", "rolled back", "cancelled with rollback: its checkpoints were undone"))
    elif run.cancel_action == CancelAction.INTERRUPT:
        badges.append(Badge("cancelled", "cancelled", "cancelled (interrupt): its work so far was kept"))
    elif run.status in FAILED:
        badges.append(Badge("failed", "timed out" if run.status == RunStatus.TIMEOUT else "failed", run.error[:200]))
    elif run.status == RunStatus.INTERRUPTED:
        badges.append(Badge("interrupted", "interrupted", "stopped at an interrupt, waiting for an answer"))
    elif run.status in UNFINISHED:
        badges.append(Badge("unfinished", run.status))
    return badges


def turn_of(run: Run, number: int) -> Turn:
    return Turn(number, run, run_input(run), run.last_ai_message, run_duration(run), run_badges(run))


def thread_turns(*, thread: ThreadMeta, page: str | int | None) -> tuple[Page, list[Turn]]:
    """Return one page of the thread's turns, oldest first; no page given: the latest turns."""
    runs: QuerySet[Run] = thread.runs.order_by("created_at", "run_id")
    paginator = Paginator(runs, TURNS_PER_PAGE)
    chosen = paginator.get_page(page if page is not None else paginator.num_pages)
    offset = chosen.start_index()
    turns = [turn_of(run, offset + index) for index, run in enumerate(chosen.object_list)]
    previous = runs.values_list("run_id", flat=True)[offset - 2] if offset > 1 else ""
    for turn in turns:
        turn.previous_run_id, previous = previous, turn.run.run_id
    return chosen, turns


def percentile(sorted_values: list[timedelta], fraction: float) -> timedelta | None:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(fraction * len(sorted_values)) - 1)]


def thread_turn_stats(*, thread_id: str) -> TurnStats:
    """Return the thread's turn figures from one read of its runs' timing and usage columns."""
    stats, durations = TurnStats(), []
    by_model: defaultdict[str, int] = defaultdict(int)
    for row in Run.objects.filter(thread_id=thread_id).values(*STATS_FIELDS).iterator():
        stats.turns += 1
        stats.rolled_back += row["cancel_action"] == CancelAction.ROLLBACK
        stats.failed += row["status"] in FAILED and row["cancel_action"] != CancelAction.ROLLBACK
        stats.tokens += row["total_tokens"]
        if row["started_at"] and row["finished_at"]:
            durations.append(row["finished_at"] - row["started_at"])
        for model, usage in (row["token_usage_by_model"] or {}).items():
            by_model[model] += usage.get("total_tokens", 0) if isinstance(usage, dict) else 0
    durations.sort()
    stats.p50, stats.p95 = percentile(durations, 0.5), percentile(durations, 0.95)
    stats.tokens_by_model = dict(sorted(by_model.items(), key=lambda item: -item[1]))
    return stats
