"""Create a thread that starts with a history: ``POST /threads`` with ``supersteps``.

Each superstep is a list of ``(values, as_node)`` updates, written through
the state accessor as LangGraph's ``bulk_update_state`` writes them: the
channels' reducers apply (an update appends messages, as the node would
have), in the process's channel mode. It is the LangGraph Platform's way to
copy a thread between deployments. All or nothing: the updates are checked
before the thread exists, and a write LangGraph refuses removes the thread
and whatever checkpoints it had got.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.errors import InvalidUpdateError

from checkpoints.accessor import UnknownStateFieldsError, state_accessor
from checkpoints.graphs import UPDATE
from checkpoints.services import thread_checkpoints_delete
from core.errors import Invalid
from threads.models import ThreadMeta
from threads.services import clean_metadata, graph_for_metadata, thread_create, thread_mark_state_updated

Superstep = Sequence[tuple[dict[str, Any] | None, str]]


def _check_channels(accessor, supersteps: Sequence[Superstep]) -> None:
    channels = accessor.writable_channels()
    for index, updates in enumerate(supersteps):
        for position, (values, node) in enumerate(updates):
            if node.startswith("__"):
                continue  # __input__ / __copy__: the real graph maps them
            if unknown := sorted(set(values or {}) - channels):
                raise Invalid(
                    f"supersteps[{index}].updates[{position}].values",
                    f"Unknown thread-state field(s): {', '.join(unknown)}",
                )


def thread_create_with_supersteps(*, supersteps: Sequence[Superstep], **create: Any) -> tuple[ThreadMeta, bool]:
    """Create a thread (``thread_create``'s arguments) and write ``supersteps`` as its history.

    An existing thread returned by ``if_exists="do_nothing"`` is left as it
    is. A refused update is ``Invalid`` naming its superstep; the thread is
    gone then, its checkpoints with it.
    """
    accessor = state_accessor(graph_for_metadata(clean_metadata(create.get("metadata"))), access=UPDATE)
    _check_channels(accessor, supersteps)
    thread, created = thread_create(**create)
    if not created:
        return thread, False
    try:
        for index, updates in enumerate(supersteps):
            try:
                accessor.bulk_update(thread.thread_id, [updates])
            except (InvalidUpdateError, UnknownStateFieldsError, ValueError, TypeError) as exc:
                raise Invalid(f"supersteps[{index}]", str(exc) or type(exc).__name__) from None
        title = (accessor.get(thread.thread_id).values or {}).get("title")
        thread_mark_state_updated(
            thread_id=thread.thread_id, title=title if isinstance(title, str) else None, messages=True
        )
    except BaseException:
        # Leave nothing half-written: no checkpoints, no row.
        thread_checkpoints_delete(thread_id=thread.thread_id)
        ThreadMeta.objects.filter(pk=thread.pk).delete()
        raise
    return ThreadMeta.objects.get(pk=thread.pk), True
