"""Edit the latest user turn and rerun it: regenerate's sibling, with the user's new text.

Like regenerate it starts no run. It answers what a client posts: the
replacement human message (a new id), the settled checkpoint before the
original one, and metadata that marks the run as an edit replay of the
source run, so feeds can hide the turn it replaces.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import BaseMessage

from checkpoints.accessor import state_accessor
from checkpoints.lineage import checkpoint_id_of
from core.errors import Conflict, NotFound
from runs.models import Run, RunStatus
from runs.services.branching import _messages, _replay_base, _source_run_id, _visible
from threads.models import ThreadMeta

# What of the original message's extras the replacement carries (attachments, quoted context).
KEPT_KWARGS = ("files", "referenced_message_contexts")


def _goal_active(values: dict[str, Any]) -> bool:
    goal = values.get("goal")
    return isinstance(goal, dict) and goal.get("status") == "active"


def _latest_turn(messages: list[BaseMessage], human_message_id: str) -> tuple[BaseMessage, BaseMessage, list[str]]:
    """Return the latest user turn's human message, its final answer and the ids from one to the other.

    Only that turn, finished with a plain-text answer (no pending tool
    call), can be edited: anything earlier is a branch's job.
    """
    humans = [i for i, m in enumerate(messages) if m.type == "human" and _visible(m)]
    if not humans or messages[humans[-1]].id != human_message_id:
        raise Conflict("Only the latest completed user turn can be edited")
    start = humans[-1]
    answers = [i for i, m in enumerate(messages) if i > start and m.type == "ai" and _visible(m)]
    answer = messages[answers[-1]] if answers else None
    if answer is None or not answer.text.strip() or getattr(answer, "tool_calls", None):
        raise Conflict("Only completed assistant text turns can be edited")
    ids = [m.id for m in messages[start : answers[-1] + 1] if m.id]
    return messages[start], answer, ids


def _replacement(source: BaseMessage, *, message_id: str, text: str) -> dict[str, Any]:
    extras = source.additional_kwargs or {}
    message: dict[str, Any] = {
        "type": "human",
        "id": message_id,
        "content": [{"type": "text", "text": text}],
        "additional_kwargs": {key: extras[key] for key in KEPT_KWARGS if key in extras},
    }
    if source.name:
        message["name"] = source.name
    return message


def _successful_source_run(thread_id: str, answer_id: str) -> Run:
    run_id = _source_run_id(thread_id, answer_id)
    run = Run.objects.filter(pk=run_id, thread_id=thread_id).first() if run_id else None
    if run is None:
        raise Conflict("Could not find source run for assistant message")
    if run.status != RunStatus.SUCCESS:
        raise Conflict("Only successful assistant runs can be edited and rerun")
    return run


def edit_regenerate_prepare(*, thread: ThreadMeta, human_message_id: str, replacement_text: str) -> dict[str, Any]:
    """Return the input, checkpoint and metadata a client posts to rerun the latest turn with new text."""
    text = replacement_text.strip()
    if not text:
        raise Conflict("Edited message cannot be empty")
    accessor = state_accessor(thread.assistant_id)
    head = accessor.get(thread.thread_id)
    if head.metadata is None:
        raise NotFound(f"Thread {thread.thread_id} has no checkpoint")
    values = head.values or {}
    if _goal_active(values):
        raise Conflict("Cannot edit while a goal is active")
    messages = _messages(head)
    human, answer, source_ids = _latest_turn(messages, human_message_id)
    if text == human.text.strip():
        raise Conflict("Edited message is unchanged")
    if not human.id:
        raise Conflict("The source user message is missing an id")
    if not answer.id:
        raise Conflict("The source assistant message is missing an id")
    base = _replay_base(accessor, thread.thread_id, head, human.id)
    run = _successful_source_run(thread.thread_id, answer.id)
    base_id = checkpoint_id_of(base)
    replacement_id = str(uuid.uuid4())
    graph_input: dict[str, Any] = {"messages": [_replacement(human, message_id=replacement_id, text=text)]}
    # Replay the current title over a titled base (a rename since would roll back); an untitled base
    # keeps none, so the replacement prompt can name the thread.
    if (values.get("title") or None) and ((base.values or {}).get("title") or None):
        graph_input["title"] = values["title"]
    return {
        "input": graph_input,
        "checkpoint": {"checkpoint_ns": "", "checkpoint_id": base_id, "checkpoint_map": None},
        "metadata": {
            "replay_kind": "edit",
            "regenerate_from_message_id": answer.id,
            "regenerate_from_run_id": run.run_id,
            "regenerate_checkpoint_id": base_id,
            "edit_from_message_id": human.id,
            "edit_message_id": replacement_id,
            "edit_version_group_id": run.metadata.get("edit_version_group_id") or human.id,
        },
        "target_run_id": run.run_id,
        "replacement_human_message_id": replacement_id,
        "source_message_ids": source_ids,
    }
