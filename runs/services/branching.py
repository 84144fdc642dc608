"""Regenerate the latest answer, and branch a conversation at an answer.

Both find their replay base by walking the checkpoint lineage back to the
settled state before the user message that produced the answer. Neither
starts a run: regenerate prepares what a client posts, and branch writes a
new thread through the state-only mutation graph.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.utils import timezone
from langchain_core.messages import BaseMessage
from langgraph.types import StateSnapshot

from checkpoints.accessor import StateAccessor, state_accessor
from checkpoints.decode_memo import shared_decodes
from checkpoints.lineage import LineageError, checkpoint_id_of, find_checkpoint_before_message
from checkpoints.serialization import serialize
from checkpoints.services import thread_checkpoints_delete
from core.errors import Conflict, NotFound
from runs.models import Run, RunEvent, RunStatus
from runs.services.admission import new_run_id
from runs.services.events import run_events_append
from threads.models import ThreadMeta
from threads.services import new_thread_id, thread_create

logger = logging.getLogger(__name__)

BRANCH_NODE = "branch"
# Checkpoints materialized per history read while looking for a turn; the
# walk goes on page after page to the thread's first checkpoint (a turn of
# the demo agent is ~3 checkpoints, so one page is ~30 turns).
HISTORY_PAGE = 100


def _messages(snapshot: StateSnapshot) -> list[BaseMessage]:
    """Return the snapshot's messages; anything else a graph stored there is no turn to act on."""
    messages = (snapshot.values or {}).get("messages")
    if not isinstance(messages, (list, tuple)):
        return []
    return [m for m in messages if isinstance(m, BaseMessage)]


def _visible(message: BaseMessage) -> bool:
    return not (message.additional_kwargs or {}).get("hide_from_ui")


def _human_before(messages: list[BaseMessage], index: int) -> BaseMessage | None:
    for message in reversed(messages[:index]):
        if message.type == "human" and _visible(message):
            return message
    return None


# The 409 of a regenerate or an edit whose turn has no settled checkpoint before it.
NO_REPLAY_BASE = "Could not find an addressable checkpoint before the target user message"


def _replay_base(
    accessor: StateAccessor, thread_id: str, start: StateSnapshot, human_id: str, *, refusal: str = NO_REPLAY_BASE
):
    """Return the settled state before ``human_id``, or refuse with 409 when the lineage is broken."""
    try:
        return find_checkpoint_before_message(accessor, thread_id, start, human_id, max_depth=None)
    except LineageError:
        raise Conflict(refusal) from None


def _source_run_id(thread_id: str, message_id: str) -> str | None:
    return (
        RunEvent.objects.filter(thread_id=thread_id, event_type="llm.ai.response", content__id=message_id)
        .values_list("run_id", flat=True)
        .first()
    )


def regenerate_prepare(*, thread: ThreadMeta, message_id: str) -> dict[str, Any]:
    """Return the input, checkpoint and metadata a client posts to regenerate ``message_id``."""
    accessor = state_accessor(thread.assistant_id)
    head = accessor.get(thread.thread_id)
    if head.metadata is None:
        raise NotFound(f"Thread {thread.thread_id} has no checkpoint")
    messages = _messages(head)
    index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
    if index is None:
        raise NotFound(f"Message {message_id} not found")
    target = messages[index]
    if target.type != "ai" or not _visible(target):
        raise Conflict("Only visible assistant messages can be regenerated")
    if [m.id for m in messages if m.type == "ai" and _visible(m)][-1] != message_id:
        raise Conflict("Only the latest assistant message can be regenerated")
    human = _human_before(messages, index)
    if human is None:
        raise Conflict("Could not find the user message for this assistant response")
    if not human.id:
        raise Conflict("The source user message is missing an id")
    source_run = _source_run_id(thread.thread_id, message_id)
    if source_run is None:
        raise Conflict("Could not find source run for assistant message")
    base = _replay_base(accessor, thread.thread_id, head, human.id)
    base_id = checkpoint_id_of(base)
    graph_input: dict[str, Any] = {"messages": [{"type": "human", "content": human.content, "id": human.id}]}
    # Replay the current title, so the regenerated turn does not bring back an older one.
    if (title := (head.values or {}).get("title")) is not None:
        graph_input["title"] = title
    return {
        "input": graph_input,
        "checkpoint": {"checkpoint_ns": "", "checkpoint_id": base_id, "checkpoint_map": None},
        "metadata": {
            "regenerate_from_message_id": message_id,
            "regenerate_from_run_id": source_run,
            "regenerate_checkpoint_id": base_id,
        },
        "target_run_id": source_run,
    }


def _history(accessor: StateAccessor, thread_id: str) -> Iterator[StateSnapshot]:
    """Yield every checkpoint of the thread, newest first, one page of reads at a time."""
    before = None
    while page := accessor.history(thread_id, limit=HISTORY_PAGE, before=before):
        yield from page
        before = checkpoint_id_of(page[-1])


def _ends_at(snapshot: StateSnapshot, targets: list[str]) -> bool:
    """Tell whether the snapshot holds every target with no visible turn after the last one."""
    messages = _messages(snapshot)
    ids = [m.id for m in messages]
    if not all(t in ids for t in targets):
        return False
    last = max(ids.index(t) for t in targets)
    return not any(_visible(m) and m.type in ("human", "ai") for m in messages[last + 1 :])


def _matched_state(accessor: StateAccessor, thread_id: str, targets: list[str]) -> StateSnapshot:
    """Return the newest checkpoint that ends at the target answers (nothing visible after).

    The whole thread is searched, however far back the answer is. A target
    no checkpoint holds is 404, as regenerate answers.
    """
    seen: set[str | None] = set()
    # Consecutive full-mode checkpoints hold the same messages: decode each once.
    with shared_decodes():
        for snapshot in _history(accessor, thread_id):
            if _ends_at(snapshot, targets):
                return snapshot
            seen.update(m.id for m in _messages(snapshot))
    if missing := [t for t in targets if t not in seen]:
        raise NotFound(f"Message {missing[0]} not found")
    raise Conflict("This turn can no longer be branched from.")


def _branch_values(accessor: StateAccessor, snapshot: StateSnapshot) -> dict[str, Any]:
    channels = accessor.writable_channels()
    return {k: v for k, v in (snapshot.values or {}).items() if k in channels}


def _strip_branch_prefix(title: str) -> str:
    while title.lower().startswith("branch:"):
        title = title[len("branch:") :].lstrip()
    return title


def branch_create(*, thread: ThreadMeta, message_id: str, message_ids_: list[str], title: str | None) -> dict[str, Any]:
    """Create a thread holding the conversation up to the chosen answer(s)."""
    accessor = state_accessor(thread.assistant_id)
    targets = [message_id, *[m for m in message_ids_ if m != message_id]]
    matched = _matched_state(accessor, thread.thread_id, targets)
    messages = _messages(matched)
    first_target = min(i for i, m in enumerate(messages) if m.id in targets)
    human = _human_before(messages, first_target)
    if human is None or not human.id:
        raise Conflict("This turn can no longer be branched from.")
    base = _replay_base(
        accessor, thread.thread_id, matched, human.id, refusal="This turn can no longer be branched from."
    )
    matched_id = checkpoint_id_of(matched)
    branch_meta = {
        "deerflow_branch": True,
        "branch_parent_thread_id": thread.thread_id,
        "branch_parent_checkpoint_id": matched_id,
        "branch_parent_message_id": message_id,
        "branch_created_at": timezone.now().isoformat(),
    }
    new_id = new_thread_id()
    source_title = (matched.values or {}).get("title")
    if not isinstance(source_title, str) or not source_title:
        source_title = thread.display_name
    branch, _ = thread_create(
        owner=thread.owner,
        thread_id=new_id,
        metadata={**thread.metadata, **branch_meta},
        graph_id=thread.assistant_id,
        title=title or _strip_branch_prefix(source_title or ""),
    )
    try:
        accessor.update(new_id, _branch_values(accessor, base), as_node=BRANCH_NODE, metadata=branch_meta)
        accessor.update(new_id, _branch_values(accessor, matched), as_node=BRANCH_NODE, metadata=branch_meta)
        if title:
            accessor.update(new_id, {"title": title}, as_node=BRANCH_NODE, metadata=branch_meta)
        seeded = _seed_feed(branch, [m for m in messages if _visible(m)])
    except Exception:
        # Leave nothing half-written: no checkpoints, no row.
        thread_checkpoints_delete(thread_id=new_id)
        branch.delete()
        raise
    return {
        "thread_id": new_id,
        "parent_thread_id": thread.thread_id,
        "parent_checkpoint_id": matched_id,
        "branched_from_message_id": message_id,
        "history_seed_mode": "seeded" if seeded else "skipped_empty",
    }


def _seed_feed(branch: ThreadMeta, messages: list[BaseMessage]) -> int:
    """Seed the branch's message feed (the UI reads run events, not checkpoints)."""
    if not messages:
        return 0
    with transaction.atomic():
        run = Run.objects.create(
            run_id=new_run_id(),
            thread=branch,
            owner_id=branch.owner_id,
            assistant_id=branch.assistant_id,
            status=RunStatus.SUCCESS,
            metadata={"branch_seed": True, "branch_parent_thread_id": branch.metadata.get("branch_parent_thread_id")},
            finished_at=timezone.now(),
        )
    events = [
        {"event_type": "llm.human.input" if m.type == "human" else "llm.ai.response", "content": serialize(m)}
        for m in messages
        if m.type in ("human", "ai")
    ]
    return run_events_append(thread_id=branch.thread_id, run_id=run.run_id, events=events)
