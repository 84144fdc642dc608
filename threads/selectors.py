"""Reads of thread metadata, always through the caller's access scope (``core.access``): its own, or a handler's."""

from __future__ import annotations

import json
from datetime import timedelta
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from checkpoints.accessor import state_accessor
from checkpoints.serialization import serialize_channel_values, thread_interrupts
from core.access import AccessScope, scope_of
from core.db import page_of, sort_keys
from core.errors import Conflict, ThreadNotFound
from threads.models import UNFINISHED_STATUSES, RunStatus, ThreadMeta, ThreadStatus

THREAD_SORT_FIELDS = ("thread_id", "status", "created_at", "updated_at", "state_updated_at")


def thread_get(*, thread_id: str, owner, scope: AccessScope | None = None) -> ThreadMeta:
    """Return the caller's thread or raise 404; one outside its scope is "not found" too."""
    thread = owned_thread_or_none(thread_id=thread_id, owner=owner, scope=scope)
    if thread is None:
        raise ThreadNotFound(thread_id)
    return thread


def owned_thread_or_none(*, thread_id: str, owner, scope: AccessScope | None = None) -> ThreadMeta | None:
    """Return the thread if the caller's scope holds it, else None (missing and out of scope alike).

    ``scope``: one a service obtained for its own action (``core.access.authorize``),
    else the one the request's authentication gave ``owner``.
    """
    scope = scope or scope_of(owner)
    if scope.is_owner_only:
        return next(iter(ThreadMeta.objects.raw(_owned_thread_sql(), [thread_id, scope.owner_id])), None)
    return ThreadMeta.objects.filter(scope.q(), thread_id=thread_id).first()


@cache
def _owned_thread_sql() -> str:
    """Return the lookup as one statement, built once.

    Every thread route runs it first: compiled by the ORM each time (a
    filtered ``first()`` with the model's ordering) it cost ~1 ms of a
    ~1.4 ms hop in ``bench.run_costs``; ``raw`` still converts the columns.
    """
    qn = connection.ops.quote_name
    return f"SELECT * FROM {qn(ThreadMeta._meta.db_table)} WHERE {qn('thread_id')} = %s AND {qn('owner_id')} = %s"


def lock_thread(thread_id: str, *, admitting: bool = False) -> str | None:
    """Lock the thread row for this transaction; return its id, None if it is gone.

    Every transaction that writes a thread's runs takes this lock first (one
    lock order; SQLite's write lock serialises anyway). ``admitting`` refuses
    a thread whose deletion has begun, or whose state an update is writing.
    """
    row = _locked_row(thread_id, admitting=admitting)
    return row["pk"] if row else None


def lock_thread_to_admit(thread_id: str) -> dict[str, Any] | None:
    """``lock_thread(admitting=True)``, returning the row with its graph binding (``assistant_id``, ``metadata``)."""
    return _locked_row(thread_id, admitting=True, fields=("assistant_id", "metadata"))


def _locked_row(thread_id: str, *, admitting: bool, fields: tuple[str, ...] = ()) -> dict[str, Any] | None:
    row = (
        ThreadMeta.objects.select_for_update()
        .filter(pk=thread_id)
        .values("pk", "deleting_at", "state_updating_at", *fields)
        .first()
    )
    if row is None:
        return None
    if admitting and row["deleting_at"] is not None:
        raise Conflict(f"Thread {thread_id} is being deleted.")
    if admitting and state_update_in_progress(row["state_updating_at"]):
        raise Conflict(f"Thread {thread_id} is having its state updated; start the run again.")
    return row


# A state update takes milliseconds; a mark older than this was left by a process that died mid-update.
STATE_UPDATE_STALE = timedelta(seconds=60)


def thread_has_unfinished_run(thread_id: str) -> bool:
    """Whether one of the thread's runs is pending, queued or running."""
    return ThreadMeta.objects.filter(pk=thread_id, runs__status__in=UNFINISHED_STATUSES).exists()


def thread_rolled_back_runs(thread_ids: list[str]) -> dict[str, frozenset[str]]:
    """Return thread id → its finished rolled-back runs, whose leftover checkpoints retention releases.

    One query through the threads' runs (a run is "finished" and "rolled back"
    on the same row: both conditions in one ``filter``).
    """
    finished = [status for status in RunStatus.values if status not in UNFINISHED_STATUSES]
    rows = ThreadMeta.objects.filter(
        pk__in=thread_ids, runs__cancel_action="rollback", runs__status__in=finished
    ).values_list("thread_id", "runs__run_id")
    found: dict[str, set[str]] = {}
    for thread_id, run_id in rows:
        found.setdefault(thread_id, set()).add(run_id)
    return {thread_id: frozenset(runs) for thread_id, runs in found.items()}


def thread_idle_check(thread_id: str, *, then: str) -> None:
    """Refuse (409) while one of the thread's runs is unfinished; ``then`` tells what to do and when."""
    if thread_has_unfinished_run(thread_id):
        raise Conflict(f"Thread {thread_id} has an unfinished run; {then}.")


def state_update_in_progress(marked_at) -> bool:
    """Whether a state update marked at ``marked_at`` may still be writing its checkpoint."""
    return marked_at is not None and timezone.now() - marked_at < STATE_UPDATE_STALE


def thread_filter(
    *,
    owner,
    metadata: dict[str, Any] | None = None,
    ids: list[str] | None = None,
    status: str | None = None,
    values: dict[str, Any] | None = None,
) -> QuerySet[ThreadMeta]:
    """Return the caller's threads (its access scope) matching metadata containment, ids, status and head values.

    ``values`` matches the rows' mirror of the head (``threads.search``):
    refresh the candidates' mirrors first.
    """
    queryset = ThreadMeta.objects.filter(scope_of(owner).q())
    if metadata:
        queryset = queryset.filter(metadata__jsoncontains=metadata)
    if values:
        queryset = queryset.filter(values_mirror__jsoncontains=values)
    if ids is not None:
        queryset = queryset.filter(thread_id__in=ids)
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def thread_search(
    *, owner, sort_by: str = "updated_at", sort_order: str = "desc", limit: int = 10, offset: int = 0, **filters: Any
) -> tuple[list[ThreadMeta], int]:
    """Return one page of the caller's threads matching ``filters`` (thread_filter()'s) and the total count."""
    order_by = sort_keys(sort_by, sort_order, tiebreak="thread_id")
    return page_of(thread_filter(owner=owner, **filters), order_by=order_by, limit=limit, offset=offset)


def thread_head_values(thread: ThreadMeta, *, in_list: bool = False) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Return (values, interrupts, status) from the thread's head checkpoint (the mode gate applies).

    One thread is read from its head's ThreadState JSON, the one ``GET
    /state`` answers (from the encoded-state cache where it may be): read
    again, it costs a parse, not a decode of every message (17 ms a read on
    a 200-turn thread before); ``json`` parses it, so integers beyond 64 bits
    stay integers. A thread ``in_list`` (a search page) is read with the
    saver alone: the cache's row query per thread would make a page's
    queries grow with its length.
    """
    accessor = state_accessor(thread.assistant_id)
    if in_list:
        snapshot = accessor.get(thread.thread_id)
        values, next_ = serialize_channel_values(snapshot.values), snapshot.next
        interrupts = thread_interrupts(snapshot)
    else:
        state = json.loads(accessor.encoded_state(thread.thread_id))
        values, next_ = state["values"], state["next"]
        interrupts = {task["id"]: task["interrupts"] for task in state["tasks"] if task["interrupts"]}
    status_ = thread.status
    # A settled thread reads its status from the head: pending interrupts make
    # it interrupted; so do the nodes a run stopped before (interrupt_before/
    # after; settled as interrupted), while a cancelled run's leftover next stays idle.
    if status_ in (ThreadStatus.IDLE, ThreadStatus.INTERRUPTED):
        stopped_before = status_ == ThreadStatus.INTERRUPTED and bool(next_)
        status_ = ThreadStatus.INTERRUPTED if interrupts or stopped_before else ThreadStatus.IDLE
    return values, interrupts, status_
