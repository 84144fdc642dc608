"""Walk a thread's checkpoint lineage: the parent chain behind regenerate and branch.

A walk follows ``parent_config`` one hop at a time and materializes each
parent through the accessor (delta checkpoints hold no message list of their
own). It fails closed: a missing link, an unaddressable parent, a cycle or an
exhausted budget raises instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

from langgraph.types import StateSnapshot

from checkpoints.accessor import StateAccessor
from checkpoints.errors import CheckpointNotFoundError

DEFAULT_MAX_DEPTH = 200


class LineageError(RuntimeError):
    """The lineage is not walkable as required (integrity error)."""


class ParentMissingError(LineageError):
    """A checkpoint on the walk has no parent link."""


def checkpoint_id_of(snapshot: StateSnapshot) -> str | None:
    return (snapshot.config or {}).get("configurable", {}).get("checkpoint_id")


def message_ids(snapshot: StateSnapshot) -> list[str]:
    return [m.id for m in (snapshot.values or {}).get("messages", []) if getattr(m, "id", None)]


def is_settled(snapshot: StateSnapshot) -> bool:
    """A state a run can start from: nothing scheduled, nothing interrupted.

    An input checkpoint also qualifies: its values are the state before that
    input, and its only task is applying the input (the first turn's has no
    settled ancestor at all).
    """
    if (snapshot.metadata or {}).get("source") == "input":
        return not any(t.interrupts for t in snapshot.tasks)
    return not snapshot.next and not any(t.interrupts for t in snapshot.tasks)


def ancestors(
    accessor: StateAccessor, thread_id: str, start: StateSnapshot, *, max_depth: int | None
) -> Iterator[StateSnapshot]:
    """Yield the parents of ``start``, nearest first, failing closed on any break.

    ``max_depth`` None walks to the thread's first checkpoint (a cycle still fails).
    """
    seen = {checkpoint_id_of(start)}
    current = start
    for _ in range(max_depth) if max_depth is not None else count():
        parent_id = (current.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        if not parent_id:
            raise ParentMissingError(f"Checkpoint {checkpoint_id_of(current)} has no parent link")
        if parent_id in seen:
            raise LineageError(f"Checkpoint lineage of thread {thread_id} has a cycle at {parent_id}")
        try:
            parent = accessor.get(thread_id, checkpoint_id=parent_id)
        except CheckpointNotFoundError:
            raise LineageError(f"Parent checkpoint {parent_id} is not addressable") from None
        seen.add(parent_id)
        yield parent
        current = parent
    raise LineageError(f"No suitable checkpoint within {max_depth} ancestors")


def find_checkpoint_before_message(
    accessor: StateAccessor,
    thread_id: str,
    start: StateSnapshot,
    message_id: str,
    *,
    max_depth: int | None = DEFAULT_MAX_DEPTH,
) -> StateSnapshot:
    """Return the nearest settled ancestor of ``start`` that does not hold ``message_id``."""
    # The nearest such ancestor of a turn is that turn's input checkpoint.
    if message_id not in message_ids(start):
        raise LineageError(f"Message {message_id} is not in checkpoint {checkpoint_id_of(start)}")
    for parent in ancestors(accessor, thread_id, start, max_depth=max_depth):
        if message_id not in message_ids(parent) and is_settled(parent):
            return parent
    raise LineageError("unreachable")  # ancestors() raises when exhausted
