"""What every route over a thread shares: the id rule, the owned lookup, the SDK's ``Thread`` object.

The run, feed, branch, state and retention routes import these; no module
imports ``threads.api`` (the thread routes themselves).
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError

from checkpoints.accessor import UnreadableStateError
from checkpoints.errors import CheckpointModeMismatchError
from core.drf import StrictCharField
from core.validation import thread_id_problem
from threads import selectors
from threads.models import ThreadMeta
from threads.search import ExtractPath, extracted


def validate_thread_id(thread_id: str) -> str:
    """Raise 422 unless ``thread_id`` is 1–64 letters, digits, ``_`` or ``-``."""
    if problem := thread_id_problem(thread_id):
        raise ValidationError({"thread_id": problem})
    return thread_id


def owned_thread(request, thread_id: str) -> ThreadMeta:
    """Return the caller's thread named in the path (422 bad id, 404 not theirs)."""
    return selectors.thread_get(thread_id=validate_thread_id(thread_id), owner=request.user)


class ThreadIdField(StrictCharField):
    """A thread id exactly as sent: ``" a"`` is refused, not trimmed into another thread's id."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if problem := thread_id_problem(value):
            raise ValidationError(problem)  # the field's own error: the serializer names the field
        return value


def thread_payload(
    thread: ThreadMeta,
    *,
    with_values: bool = True,
    select: list[str] | None = None,
    in_list: bool = False,
    extract: dict[str, ExtractPath] | None = None,
) -> dict[str, Any]:
    """Return the SDK's ``Thread`` object; with ``extract``, its ``extracted`` values too.

    In a list (search), a thread whose checkpoints this process must not read
    (a delta thread in a full-mode process) or cannot read (values its
    graph's channels refuse) is listed with its title only and the reason in
    ``error``: one such thread must not turn the owner's whole search into a
    409. A single-thread read answers 409.
    Extraction reads the whole object, whatever ``select`` keeps.
    """
    needed = set(select) if select is not None else None
    if needed is not None and extract:
        needed |= {path.root for path in extract.values()}
    values: dict[str, Any] = {"title": thread.display_name} if thread.display_name else {}
    interrupts: dict[str, Any] = {}
    status_ = thread.status
    error = None
    if with_values and (needed is None or {"values", "interrupts", "status"} & needed):
        try:
            values, interrupts, status_ = selectors.thread_head_values(thread, in_list=in_list)
        except (CheckpointModeMismatchError, UnreadableStateError) as exc:
            if not in_list:
                raise
            error = str(exc)
    payload = {
        "thread_id": thread.thread_id,
        "created_at": thread.created_at.isoformat(),
        "updated_at": thread.updated_at.isoformat(),
        "state_updated_at": (thread.state_updated_at or thread.updated_at).isoformat(),
        "metadata": thread.metadata,
        "status": status_,
        "values": values,
        "interrupts": interrupts,
        "config": {},
        "error": error,
    }
    found = extracted(payload, extract) if extract else None
    if select:
        payload = {k: v for k, v in payload.items() if k in select}
    if found is not None:
        payload["extracted"] = found
    return payload
