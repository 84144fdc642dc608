"""A thread's goal: DeerFlow's ``goal`` channel, written as a state-only checkpoint.

DeerFlow keeps the goal in thread state (channel ``goal``), so it forks,
rolls back and is deleted with the checkpoints. A write is a new head,
``source: update``, one step on, that changes only that channel: the
checkpoint DeerFlow's raw writer produces (less the ``writes`` metadata,
which LangGraph 1.x no longer records). Here the mutation graph writes it,
so delta threads stay readable. A graph without a ``goal`` channel has no
goal: setting one is refused (409). Writes take the checkpoint-write
reservation state updates take: no run is admitted while one is written.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from checkpoints.accessor import state_accessor
from checkpoints.graphs import UPDATE
from checkpoints.services import thread_checkpoints_delete
from core.errors import Conflict, Invalid, ThreadNotFound
from threads.models import ThreadMeta
from threads.services import checkpoint_write_reserved, thread_create, thread_mark_state_updated

GOAL_CHANNEL = "goal"
GOAL_NODE = "goal"
MAX_OBJECTIVE_CHARS = 4000
MAX_CONTINUATIONS = 8
# How many evaluations without progress the worker tolerates before it stands down (DeerFlow's default).
MAX_NO_PROGRESS_CONTINUATIONS = 2
SET_REFUSAL = "Thread has a run in flight. Set the goal after the run finishes."
CLEAR_REFUSAL = "Thread has a run in flight. Clear the goal after the run finishes."


def goal_state_build(objective: str, *, max_continuations: int = MAX_CONTINUATIONS) -> dict[str, Any]:
    """Return a fresh active goal: the objective with its whitespace collapsed, no continuations used."""
    normalized = " ".join(objective.split())
    if not normalized:
        raise Invalid("objective", "Goal objective must not be empty.")
    if len(normalized) > MAX_OBJECTIVE_CHARS:
        raise Invalid("objective", f"Goal objective must be at most {MAX_OBJECTIVE_CHARS} characters.")
    now = timezone.now().isoformat()
    return {
        "objective": normalized,
        "status": "active",
        "created_at": now,
        "updated_at": now,
        "continuation_count": 0,
        "max_continuations": max(0, min(max_continuations, MAX_CONTINUATIONS)),
        "no_progress_count": 0,
        "max_no_progress_continuations": MAX_NO_PROGRESS_CONTINUATIONS,
    }


def thread_goal(thread: ThreadMeta) -> dict[str, Any] | None:
    """Return the goal in the thread's head state, None when it has none."""
    snapshot = state_accessor(thread.assistant_id).get(thread.thread_id)
    goal = (snapshot.values or {}).get(GOAL_CHANNEL)
    return goal if isinstance(goal, dict) else None


def _goal_write(thread: ThreadMeta, goal: dict[str, Any] | None, *, refusal: str) -> None:
    accessor = state_accessor(thread.assistant_id, access=UPDATE)
    if GOAL_CHANNEL not in accessor.writable_channels():
        if goal is None:
            return  # no goal can have been set
        raise Conflict(f"Graph {accessor.spec.graph_id} has no '{GOAL_CHANNEL}' channel to keep a thread goal in.")
    with checkpoint_write_reserved(thread_id=thread.thread_id, refusal=refusal):
        if goal is None and thread_goal(thread) is None:
            return  # nothing to clear: no checkpoint is written
        accessor.update(thread.thread_id, {GOAL_CHANNEL: goal}, as_node=GOAL_NODE)
    thread_mark_state_updated(thread_id=thread.thread_id)


def thread_goal_set(*, owner, thread_id: str, objective: str, max_continuations: int) -> dict[str, Any]:
    """Set (or replace) the thread's goal; the thread is created when the id is free."""
    goal = goal_state_build(objective, max_continuations=max_continuations)
    try:
        thread, created = thread_create(owner=owner, thread_id=thread_id, if_exists="do_nothing")
    except Conflict:
        raise ThreadNotFound(thread_id) from None  # another user's: 404, as on every thread route
    try:
        _goal_write(thread, goal, refusal=SET_REFUSAL)
    except Exception:
        if created:  # a refused goal leaves no thread behind
            thread_checkpoints_delete(thread_id=thread.thread_id)
            thread.delete()
        raise
    return goal


def thread_goal_clear(*, thread: ThreadMeta) -> None:
    """Clear the thread's goal; a thread with none is left as it is."""
    _goal_write(thread, None, refusal=CLEAR_REFUSAL)
