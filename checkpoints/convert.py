"""Convert delta threads to full storage, so a full-mode process can serve them.

A delta checkpoint keeps only its own writes to ``messages`` (plus a snapshot
every few updates), and the mode gate keeps a full-mode process away from it.
Converting rewrites every checkpoint of the thread in place (all branches and
namespaces, same ids, parents, pending writes and metadata) with each delta
channel's materialized value, drops the delta marks from the metadata (the
gate reads the thread's mode there, ``checkpoints.modes.metadata_uses_delta``)
and, before committing, reads the thread back in full mode: the state at the
head and every history entry must equal what delta mode read, or nothing of
the thread is kept.

A thread is converted in one transaction on a connection of its own: the
process's savers commit every write on their own (SQLite) or on pooled
autocommit connections (PostgreSQL), and the verification must read the
rewritten rows before anyone else can.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, copy_checkpoint
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import StateSnapshot

from checkpoints.accessor import StateAccessor, thread_config
from checkpoints.backend import Backend, current_backend
from checkpoints.graphs import (
    READ,
    GraphSpec,
    adapt_graph,
    call_factory,
    channel_table,
    graph_runtime,
    load_graph,
    resolve_graph,
)
from checkpoints.modes import DELTA_COUNTERS_KEY, DELTA_MARKER_KEY, metadata_uses_delta, resolve_snapshot_frequency
from checkpoints.retention import replay_channels, replayed_value
from checkpoints.runtime import saver_serde, sync_resources
from checkpoints.storage import require_table_backend, thread_storage_get
from core.errors import Conflict

# PostgreSQL keeps a channel value as a blob per (channel, version) and never
# overwrites one (LangGraph's upsert does nothing on conflict): the delta blob
# (an "empty" marker or a snapshot) goes before the full value is put.
POSTGRES_DELETE_BLOB_SQL = """
DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s
"""

CONVERTED = "converted"
WOULD_CONVERT = "would convert"
SKIPPED = "skipped"

Ref = tuple[str, str]  # (checkpoint_ns, checkpoint_id)
# States read and compared at a time: 100 at 200 turns hold ~20,000 messages.
HISTORY_PAGE = 100


class ConversionError(Conflict, RuntimeError):
    """A thread could not be converted; nothing of it was changed (409)."""


@dataclass(frozen=True)
class ThreadConversion:
    """What converting one thread did, or in a dry run would do."""

    thread_id: str
    outcome: str  # CONVERTED, WOULD_CONVERT or SKIPPED
    checkpoints: int = 0
    bytes_before: int = 0
    bytes_after: int | None = None
    reason: str = ""


class _DeferredCommit:
    """A sqlite3 connection whose ``commit()`` waits for the conversion's own.

    ``SqliteSaver`` commits after every statement it runs; through this its
    writes stay in the transaction the conversion opened and ends.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def commit(self) -> None:
        pass


@contextmanager
def _sqlite_transaction(backend: Backend) -> Iterator[BaseCheckpointSaver]:
    from langgraph.checkpoint.sqlite import SqliteSaver  # loaded on the backend that uses it, as the runtime does

    conn = sqlite3.connect(backend.sqlite_path, check_same_thread=False, timeout=20, isolation_level=None)
    try:
        saver = SqliteSaver(cast(sqlite3.Connection, _DeferredCommit(conn)), serde=saver_serde())
        saver.setup()  # its executescript commits: before the transaction, not inside it
        # IMMEDIATE: the write lock is taken before the thread is read, so no
        # writer (a run being admitted included) slips in between.
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield saver
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
    finally:
        conn.close()


@contextmanager
def _postgres_transaction(backend: Backend) -> Iterator[BaseCheckpointSaver]:
    # Loaded on the backend that uses them, as the runtime does.
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    with Connection.connect(backend.conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        with conn.transaction():
            yield PostgresSaver(conn, serde=saver_serde())


def _transaction_saver(backend: Backend) -> AbstractContextManager[BaseCheckpointSaver]:
    """Return a context giving a saver whose reads and writes form one transaction, committed at its end."""
    return _sqlite_transaction(backend) if backend.kind == "sqlite" else _postgres_transaction(backend)


def _accessor(spec: GraphSpec, mode: str, saver: BaseCheckpointSaver) -> StateAccessor:
    """Return an accessor of ``spec`` stored the ``mode`` way on ``saver`` (a factory is asked as for a read)."""
    store = sync_resources().store
    frequency = resolve_snapshot_frequency()
    loaded = load_graph(spec.import_path)
    built = None
    if loaded.kind == "factory":
        graph = call_factory(
            loaded, config={"configurable": {}, "metadata": {}}, runtime=graph_runtime(READ, store=store)
        )
        built = adapt_graph(graph, mode, frequency, graph_id=spec.graph_id)
    return StateAccessor(spec, mode, frequency, saver=saver, store=store, built=built)


def _full_metadata(metadata: Mapping[str, Any], channels: Mapping[str, DeltaChannel]) -> dict[str, Any]:
    """Return ``metadata`` without the delta marks: the marker, and the delta channels' counters."""
    converted = {key: value for key, value in metadata.items() if key != DELTA_MARKER_KEY}
    counters = converted.pop(DELTA_COUNTERS_KEY, None)
    if isinstance(counters, Mapping) and (kept := {k: v for k, v in counters.items() if k not in channels}):
        converted[DELTA_COUNTERS_KEY] = kept
    return converted


def _is_delta(saved: CheckpointTuple) -> bool:
    values = saved.checkpoint["channel_values"]
    return metadata_uses_delta(saved.metadata) or any(isinstance(v, _DeltaSnapshot) for v in values.values())


def _ref(saved: CheckpointTuple) -> Ref:
    configurable = saved.config["configurable"]
    return (configurable.get("checkpoint_ns", ""), configurable["checkpoint_id"])


def _materialized(
    saver: BaseCheckpointSaver,
    thread_id: str,
    saved: CheckpointTuple,
    channels: Mapping[str, DeltaChannel],
    read: Mapping[str, Any],
) -> dict[str, Any]:
    """Return each delta channel's value at ``saved``.

    Taken, cheapest first, from its snapshot, its full value, the state the
    delta reading read for it (``read``), else by replaying its writes (a
    channel the graph's state does not output). The reading saves a replay
    per checkpoint: a quarter of the conversion's time at 200 turns.
    """
    stored = saved.checkpoint["channel_values"]
    values = {}
    for name, spec in channels.items():
        if name not in saved.checkpoint["channel_versions"]:
            continue  # never written: empty in both modes
        value = stored.get(name)
        if isinstance(value, _DeltaSnapshot):
            values[name] = value.value
        elif name in stored:
            values[name] = value  # written before the thread went delta
        elif name in read:
            values[name] = read[name]
        else:
            values[name] = replayed_value(saver, thread_id, _ref(saved), name, spec)
    return values


def _observed_messages(messages: Any) -> tuple:
    return tuple((m.id, m.type, m.content) for m in messages or ())


def _observed(accessor: StateAccessor, snapshot: StateSnapshot) -> tuple:
    """Return what a client reads of one state: its id, next nodes and values (messages by id, type, text)."""
    values = dict(snapshot.values or {})
    messages = {name: _observed_messages(values.pop(name, None)) for name in sorted(accessor.message_channels())}
    return (snapshot.config["configurable"].get("checkpoint_id"), snapshot.next, messages, values)


def _compared(delta: StateAccessor, full: StateAccessor, before: StateSnapshot, after: StateSnapshot) -> None:
    """Raise ``ConversionError`` unless a full-mode state reads as its delta one did."""
    if _observed(delta, before) != _observed(full, after):
        checkpoint_id = before.config["configurable"].get("checkpoint_id")
        raise ConversionError(f"state {checkpoint_id} reads differently after conversion; nothing was changed")


def _rewrite(
    saver: Any,
    kind: str,
    thread_id: str,
    saved: CheckpointTuple,
    values: Mapping[str, Any],
    channels: Mapping[str, DeltaChannel],
) -> None:
    """Store ``saved`` again under its id and parent with ``values`` in place of its delta channels."""
    checkpoint = copy_checkpoint(saved.checkpoint)
    checkpoint["channel_values"] = {**checkpoint["channel_values"], **values}
    ns = saved.config["configurable"].get("checkpoint_ns", "")
    parent = saved.parent_config or thread_config(thread_id, checkpoint_ns=ns)
    versions = {name: checkpoint["channel_versions"][name] for name in values}
    if kind == "postgres":
        with saver.conn.cursor() as cursor:
            for name, version in versions.items():
                cursor.execute(POSTGRES_DELETE_BLOB_SQL, (thread_id, ns, name, version))
    saver.put(parent, checkpoint, _full_metadata(saved.metadata, channels), versions)


def _own_delta(spec: GraphSpec) -> str:
    """Say why the graph's threads stay delta in any mode (empty: they need not)."""
    if isinstance(channel_table(spec, "full", resolve_snapshot_frequency()).get("messages"), DeltaChannel):
        return f"graph {spec.graph_id!r} compiles its own DeltaChannel for messages, so its threads stay delta"
    return ""


def _foreign_delta(tuples: list[CheckpointTuple], channels: Mapping[str, DeltaChannel]) -> str:
    """Say which checkpoint holds a delta channel the conversion does not know (empty: none does)."""
    for saved in tuples:
        ns, checkpoint_id = _ref(saved)
        stored = saved.checkpoint["channel_values"]
        foreign = [k for k, v in stored.items() if isinstance(v, _DeltaSnapshot) and (ns or k not in channels)]
        if foreign:
            return f"checkpoint {checkpoint_id} holds delta channels the graph does not declare: {sorted(foreign)}"
    return ""


def _precheck(
    thread_id: str, spec: GraphSpec, tuples: list[CheckpointTuple], channels: Mapping[str, DeltaChannel], size: int
) -> ThreadConversion | None:
    """Return the skip outcome of a thread that needs no conversion (None: convert it); refuse an unknown shape."""
    if not any(_is_delta(saved) for saved in tuples):
        return ThreadConversion(thread_id, SKIPPED, len(tuples), size, reason="already full")
    if reason := _own_delta(spec):
        return ThreadConversion(thread_id, SKIPPED, len(tuples), size, reason=reason)
    if reason := _foreign_delta(tuples, channels):
        raise ConversionError(f"Thread {thread_id}: {reason}")
    return None


def _thread_tuples(saver: BaseCheckpointSaver, thread_id: str) -> list[CheckpointTuple]:
    """Return every checkpoint of the thread, in every namespace (a config without a namespace lists them all)."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    return list(saver.list(config))


def _convert_verified(
    saver: BaseCheckpointSaver,
    kind: str,
    thread_id: str,
    spec: GraphSpec,
    tuples: list[CheckpointTuple],
    channels: Mapping[str, DeltaChannel],
) -> None:
    """Rewrite every checkpoint full, comparing each history page as full mode reads it with its delta reading.

    A page at a time (``HISTORY_PAGE``): a 1,000-turn thread's history holds
    ~3,000 states of up to 2,000 messages each, too many to keep. A page's
    checkpoints are rewritten before it is read in full mode, which reads
    only their own rows; the delta reading of the next (older) page walks only
    ancestors of its checkpoints, which are older still and not yet rewritten.
    """
    delta, full = _accessor(spec, "delta", saver), _accessor(spec, "full", saver)
    head = delta.get(thread_id)
    unread = {_ref(saved): saved for saved in tuples}
    before = None
    while page := delta.history(thread_id, limit=HISTORY_PAGE, before=before):
        for snapshot in page:
            saved = unread.pop(("", snapshot.config["configurable"]["checkpoint_id"]))
            values = _materialized(saver, thread_id, saved, channels, snapshot.values or {})
            _rewrite(saver, kind, thread_id, saved, values, channels)
        converted = full.history(thread_id, limit=HISTORY_PAGE, before=before)
        if len(converted) != len(page):
            raise ConversionError(f"{len(page)} states read in delta mode, {len(converted)} in full mode")
        for delta_state, full_state in zip(page, converted, strict=True):
            _compared(delta, full, delta_state, full_state)
        before = page[-1].config["configurable"]["checkpoint_id"]
    # Subgraph namespaces: only their metadata carries the delta marks.
    for (ns, _), saved in unread.items():
        values = _materialized(saver, thread_id, saved, channels, {}) if not ns else {}
        _rewrite(saver, kind, thread_id, saved, values, channels)
    _compared(delta, full, head, full.get(thread_id))


def thread_convert(
    *, thread_id: str, graph_id: str, dry_run: bool = False, guard: Callable[[], None] | None = None
) -> ThreadConversion:
    """Convert one thread from delta to full storage; a full thread is skipped.

    ``guard`` runs inside the write transaction before anything is read
    (refuse by raising, e.g. while a run of the thread is unfinished). A
    state that reads differently in full mode raises ``ConversionError``
    and the thread is left as it was.
    """
    require_table_backend()
    spec = resolve_graph(graph_id)
    channels = replay_channels(graph_id)
    bytes_before = thread_storage_get(thread_id=thread_id)["total"]["bytes"]
    if dry_run:
        return _planned(thread_id, spec, channels, bytes_before)
    backend = current_backend()
    with _transaction_saver(backend) as saver:
        if guard is not None:
            guard()
        tuples = _thread_tuples(saver, thread_id)
        if skipped := _precheck(thread_id, spec, tuples, channels, bytes_before):
            return skipped
        _convert_verified(saver, backend.kind, thread_id, spec, tuples, channels)
    bytes_after = thread_storage_get(thread_id=thread_id)["total"]["bytes"]
    return ThreadConversion(thread_id, CONVERTED, len(tuples), bytes_before, bytes_after)


def _planned(thread_id: str, spec: GraphSpec, channels: Mapping[str, DeltaChannel], size: int) -> ThreadConversion:
    """Return what converting would do, read through the process's saver; nothing is written."""
    tuples = _thread_tuples(sync_resources().saver, thread_id)
    return _precheck(thread_id, spec, tuples, channels, size) or ThreadConversion(
        thread_id, WOULD_CONVERT, len(tuples), size
    )
