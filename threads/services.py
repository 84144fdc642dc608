"""Writes of threads: create, update, copy, delete, and status/title mirroring."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from langchain_core.runnables import RunnableConfig
from langchain_core.utils.uuid import uuid7

from checkpoints.accessor import state_accessor
from checkpoints.graphs import DEFAULT_GRAPH_ID, UPDATE, resolve_graph
from checkpoints.modes import SERVER_OWNED_METADATA_KEYS
from checkpoints.serialization import checkpoint_ref
from checkpoints.services import thread_checkpoints_copy, thread_checkpoints_delete
from core.custom_encryption import keeps_plain_copies
from core.errors import Conflict, Invalid, ThreadNotFound
from core.validation import thread_id_problem
from threads.models import ThreadMeta, ThreadStatus
from threads.projects import PROJECT_METADATA_KEY, project_lock_assignable, project_metadata
from threads.search import thread_message_index_refresh
from threads.selectors import lock_thread, owned_thread_or_none, thread_has_unfinished_run, thread_idle_check
from threads.stream_follow import announce_thread_deleted
from threads.stream_log import PendingEvent, thread_stream_append
from threads.ttl import TTLPolicy, default_thread_ttl, ttl_fields, ttl_policy_check_supported, ttl_restarted

logger = logging.getLogger(__name__)

# Keys only the server may write into thread metadata.
RESERVED_METADATA_KEYS = frozenset({"owner", "owner_id", "user_id", PROJECT_METADATA_KEY, *SERVER_OWNED_METADATA_KEYS})


def title_column(title: str) -> str:
    """What ``display_name`` keeps of a checkpoint's title: none of it when encryption may seal the
    messages it comes from (the title stays in the sealed state), else its first 256 characters."""
    return title[:256] if keeps_plain_copies() else ""


def clean_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Return client metadata without server-owned keys."""
    return {k: v for k, v in (metadata or {}).items() if k not in RESERVED_METADATA_KEYS}


def new_thread_id() -> str:
    """Return a time-ordered thread id (UUIDv7, as the LangGraph Platform issues)."""
    return str(uuid7())


def graph_for_metadata(metadata: dict[str, Any]) -> str:
    """Return the graph whose schema reads the thread: metadata graph_id, else the default."""
    graph_id = metadata.get("graph_id") or metadata.get("assistant_id") or DEFAULT_GRAPH_ID
    return resolve_graph(str(graph_id)).graph_id


def thread_create(
    *,
    owner,
    thread_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    if_exists: str = "raise",
    graph_id: str | None = None,
    title: str = "",
    ttl: TTLPolicy | None = None,
    project_id: str | None = None,
) -> tuple[ThreadMeta, bool]:
    """Create a thread; return (thread, created).

    ``if_exists="do_nothing"`` returns the caller's existing thread (its TTL
    as it was). An id held by another user is a conflict either way, and
    never reveals that thread. ``graph_id`` (else the metadata's) names the
    graph whose schema reads it; ``ttl`` starts its clock now (without one,
    the deployment's ``checkpointer.ttl``, if any: threads a run or a cron
    creates included). Every
    interface creates threads here, so an id no route could address
    (``"dot.dot"``, ``"été"``) is refused here, not only by the routes.
    ``project_id`` files it in one of the owner's open projects, checked in
    the insert's transaction, so a refused project leaves no row.
    """
    if thread_id is not None and (problem := thread_id_problem(thread_id)):
        raise Invalid("thread_id", problem)
    metadata = clean_metadata(metadata)
    thread_id = thread_id or new_thread_id()
    graph_id = resolve_graph(graph_id).graph_id if graph_id else graph_for_metadata(metadata)
    ttl = ttl or default_thread_ttl()
    if ttl is not None:
        ttl_policy_check_supported(ttl)
    now = timezone.now()
    try:
        with transaction.atomic():
            if project_id is not None:
                project_lock_assignable(owner=owner, project_id=project_id)
                metadata = project_metadata(metadata, project_id)
            thread = ThreadMeta(
                thread_id=thread_id,
                owner=owner,
                metadata=metadata,
                assistant_id=graph_id,
                display_name=title_column(title),
                state_updated_at=now if title else None,
                project_id=project_id,
                **(ttl_fields(ttl, now=now) if ttl else {}),
            )
            thread.full_clean(validate_unique=False)
            thread.save(force_insert=True)
            return thread, True
    except IntegrityError:
        existing = owned_thread_or_none(thread_id=thread_id, owner=owner)
        if existing is not None and if_exists == "do_nothing":
            return existing, False
        raise Conflict(f"Thread {thread_id} already exists") from None


def thread_update(*, thread: ThreadMeta, metadata: dict[str, Any], ttl: TTLPolicy | None = None) -> ThreadMeta:
    """Merge ``metadata`` into the thread's metadata; ``ttl`` replaces its TTL, the clock starting now."""
    if ttl is not None:
        ttl_policy_check_supported(ttl)
    with transaction.atomic():
        locked = ThreadMeta.objects.select_for_update().get(pk=thread.pk)
        locked.metadata = {**locked.metadata, **clean_metadata(metadata)}
        fields = ["metadata", "updated_at"]
        if ttl is not None:
            for name, value in ttl_fields(ttl, now=timezone.now()).items():
                setattr(locked, name, value)
                fields.append(name)
        locked.save(update_fields=fields)
    return locked


def thread_delete(*, thread: ThreadMeta, expired_at: datetime | None = None) -> None:
    """Delete a thread with everything it owns: checkpoints, writes, runs and events.

    LangGraph's rows are deleted through the saver, on its own connection, so
    that step cannot share the ORM transaction (on SQLite it would wait on the
    ORM's write lock). The thread is therefore first marked as being deleted,
    under its row lock and only while no run is unfinished; admission takes
    the same lock and refuses a marked thread. A refused delete (409) has
    written nothing; one that passed the mark cannot race a new run. If the
    saver step fails the mark is lifted, and a repeated delete finishes a
    half-done one. ``expired_at`` (the TTL sweep's claim) also refuses a
    thread whose expiry moved since, i.e. one that was used meanwhile.
    """
    with transaction.atomic():
        if lock_thread(thread.thread_id) is None:
            raise ThreadNotFound(thread.thread_id)
        thread_idle_check(thread.thread_id, then="cancel it before deleting the thread")
        if expired_at is not None and not ThreadMeta.objects.filter(pk=thread.pk, expires_at=expired_at).exists():
            raise Conflict(f"Thread {thread.thread_id} was used after it expired; its TTL starts over.")
        ThreadMeta.objects.filter(pk=thread.pk).update(deleting_at=timezone.now())
    try:
        thread_checkpoints_delete(thread_id=thread.thread_id)
    except Exception:
        ThreadMeta.objects.filter(pk=thread.pk).update(deleting_at=None)
        raise
    with transaction.atomic():
        lock_thread(thread.thread_id)
        ThreadMeta.objects.filter(pk=thread.pk).delete()
        # Open protocol streams follow this life of the id; the next one (anyone may create the id again) is not theirs.
        transaction.on_commit(partial(announce_thread_deleted, thread.thread_id))


def thread_bind_graph(
    *, thread_id: str, graph_id: str, assistant_id: str | None = None, bound: dict[str, Any] | None = None
) -> None:
    """Make ``graph_id`` the graph that reads the thread: the graph of its latest run, as on the Platform.

    Call holding the thread lock (run admission). State, history and the
    console read the thread with that graph's schema from then on; the
    thread's ``metadata.graph_id`` follows, and ``metadata.assistant_id``
    becomes the run's assistant (its UUID, a system one for a graph name),
    so a search by graph or by assistant finds it (the Agent Chat UI's
    history lists a thread by the assistant id it was set to).
    ``bound``: the row's ``assistant_id`` and ``metadata`` as read under that lock.
    """
    row: Mapping[str, Any] = (
        bound if bound is not None else ThreadMeta.objects.filter(pk=thread_id).values("assistant_id", "metadata").get()
    )
    metadata = row["metadata"] or {}
    stamped = {"graph_id": graph_id, **({"assistant_id": assistant_id} if assistant_id else {})}
    if row["assistant_id"] == graph_id and all(metadata.get(k) == v for k, v in stamped.items()):
        return
    ThreadMeta.objects.filter(pk=thread_id).update(
        assistant_id=graph_id, metadata={**metadata, **stamped}, updated_at=timezone.now()
    )


def thread_mark_busy(*, thread_id: str) -> bool:
    """Mark the thread busy: a run of it started; its TTL starts over. False: the thread is gone.

    The UPDATE locks the thread row (in a transaction, the lock order's first step).
    """
    now = timezone.now()
    return bool(
        ThreadMeta.objects.filter(pk=thread_id).update(
            status=ThreadStatus.BUSY, updated_at=now, expires_at=ttl_restarted(now)
        )
    )


def thread_settle(
    *,
    thread_id: str,
    failed: bool,
    interrupted: bool = False,
    title: str | None = None,
    only_if_busy: bool = False,
    state_changed: bool = True,
    now: datetime | None = None,
) -> bool:
    """Set the thread's status after a run ended: ``error``, ``interrupted`` or ``idle``; False if it changed nothing.

    ``title`` mirrors the checkpoint's title into ``display_name``;
    ``only_if_busy`` leaves a thread alone that another run already settled.
    The thread's TTL starts over, from ``now`` (the run's end) when given.
    """
    now = now or timezone.now()
    status = ThreadStatus.ERROR if failed else ThreadStatus.INTERRUPTED if interrupted else ThreadStatus.IDLE
    fields: dict[str, Any] = {"status": status, "updated_at": now, "expires_at": ttl_restarted(now)}
    if state_changed:
        fields["state_updated_at"] = now
    if title:
        fields["display_name"] = title_column(title)
    threads = ThreadMeta.objects.filter(pk=thread_id)
    if only_if_busy:
        threads = threads.filter(status=ThreadStatus.BUSY)
    return bool(threads.update(**fields))


def thread_copy(*, thread: ThreadMeta) -> ThreadMeta:
    """Create a new thread of the same owner holding a copy of every checkpoint."""
    copy = ThreadMeta(
        thread_id=new_thread_id(),
        owner_id=thread.owner_id,
        assistant_id=thread.assistant_id,
        display_name=thread.display_name,
        metadata=dict(thread.metadata),
        state_updated_at=thread.state_updated_at,
        project_id=thread.project_id,
    )
    copy.save(force_insert=True)
    try:
        thread_checkpoints_copy(source_thread_id=thread.thread_id, target_thread_id=copy.thread_id)
    except Exception:
        # Leave nothing half-written: no row, no partial checkpoints.
        thread_checkpoints_delete(thread_id=copy.thread_id)
        copy.delete()
        raise
    return copy


def thread_mark_state_updated(*, thread_id: str, title: str | None = None, messages: bool = False) -> None:
    """Record a state change, mirroring the checkpoint ``title`` into ``display_name``; the TTL starts over.

    ``messages``: the change may have rewritten the messages, so the thread's
    row of the message index is rewritten from the new head (one head read).
    """
    now = timezone.now()
    fields: dict[str, Any] = {"state_updated_at": now, "updated_at": now, "expires_at": ttl_restarted(now)}
    if title is not None:
        fields["display_name"] = title_column(str(title))
    if not ThreadMeta.objects.filter(pk=thread_id).update(**fields):
        raise ThreadNotFound(thread_id)
    if messages:
        thread_message_index_refresh(thread_id=thread_id)


@contextmanager
def checkpoint_write_reserved(*, thread_id: str, refusal: str) -> Iterator[None]:
    """Hold the thread's checkpoint-write reservation while the body writes a checkpoint.

    The check for runs in flight and a mark on the thread commit under the
    thread lock, and admission refuses a marked thread until the body is
    done: otherwise a run admitted between the check and the write started
    from the head being replaced, and its rollback deleted the acknowledged
    write. ``refusal``: the 409's text while a run is in flight. State
    updates, goal writes and compaction share it, as DeerFlow's do.
    """
    with transaction.atomic():
        if lock_thread(thread_id) is None:
            raise ThreadNotFound(thread_id)
        if thread_has_unfinished_run(thread_id):
            raise Conflict(refusal)
        ThreadMeta.objects.filter(pk=thread_id).update(state_updating_at=timezone.now())
    try:
        yield
    finally:
        ThreadMeta.objects.filter(pk=thread_id).update(state_updating_at=None)


def thread_state_update(
    *,
    thread: ThreadMeta,
    values: dict[str, Any] | None,
    as_node: str | None = None,
    checkpoint_id: str | None = None,
) -> RunnableConfig:
    """Write ``values`` as a new head through the mutation graph; return its config.

    Reducer channels are replaced, not appended. Refused while a run is in
    flight: the run would write over (or under) the manual state.
    """
    with checkpoint_write_reserved(
        thread_id=thread.thread_id, refusal="Thread has a run in flight. Update state after the run finishes."
    ):
        config = state_accessor(thread.assistant_id, access=UPDATE).update(
            thread.thread_id, values, as_node=as_node, checkpoint_id=checkpoint_id
        )
    title = (values or {}).get("title")
    thread_mark_state_updated(
        thread_id=thread.thread_id,
        title=title if isinstance(title, str) else None,
        messages=values is None or "messages" in values,  # None: a copy of an earlier checkpoint becomes head
    )
    return config


def thread_log_state_update(
    *, thread_id: str, config: RunnableConfig, values: dict[str, Any] | None, as_node: str | None
) -> list[dict]:
    """Append a ``state_update`` event to the thread's log (the join stream's ``state_update`` mode); return it.

    Outside every protocol-v2 channel, so only the classic join stream sends it.
    """
    checkpoint = checkpoint_ref(config)
    assert checkpoint is not None, "config is the update's non-empty config"
    data = {"checkpoint": checkpoint, "as_node": as_node, "values": values}
    event = PendingEvent(f"state:{checkpoint['checkpoint_id']}", "state_update", [], data)
    return thread_stream_append(thread_id=thread_id, run_id="", events=[event])
