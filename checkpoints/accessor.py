"""The one way to read and write thread state: a graph, its saver and the frozen mode.

Delta checkpoints carry no ``messages`` value of their own, so reading
``channel_values`` raw gives wrong answers; everything goes through a compiled
graph here, and every read and write passes the mode gate. Sync methods use
the sync saver (views, admin, commands), async twins the loop's async saver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.serde._msgpack import STRICT_MSGPACK_ENABLED as STRICT_MSGPACK
from langgraph.errors import InvalidUpdateError
from langgraph.graph.state import CompiledStateGraph, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Overwrite, StateSnapshot, StateUpdate

from checkpoints.backend import Backend
from checkpoints.decode_memo import shared_decodes
from checkpoints.errors import CheckpointNotFoundError
from checkpoints.graphs import (
    EXECUTE,
    READ,
    GraphSpec,
    acall_factory,
    adapt_graph,
    call_factory,
    graph_cache,
    graph_runtime,
    load_graph,
    mutation_graph_of,
    resolve_graph,
    stores_messages,
)
from checkpoints.modes import check_metadata, inject_mode, process_mode
from checkpoints.reducer import stored_messages
from checkpoints.runtime import async_resources, sync_resources
from checkpoints.serialization import StateEncoder, json_array
from checkpoints.state_cache import PinnedSaver, StoredInputs, read_inputs, state_cache
from core.db import db_async
from core.errors import Conflict, Invalid

# Above this many misses in one history page, the saver lists the page once
# (one query, as an uncached read) instead of reading each checkpoint.
BULK_TUPLE_READS = 4

if TYPE_CHECKING:
    from langgraph_sdk.runtime import AccessContext

logger = logging.getLogger(__name__)


def thread_config(thread_id: str, checkpoint_id: str | None = None, checkpoint_ns: str = "") -> RunnableConfig:
    """Return the RunnableConfig addressing a thread (and optionally one checkpoint)."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


# Node name recorded for state-only writes when the client names none.
DEFAULT_MUTATION_NODE = "manual_state_update"
# LangGraph's own special update targets, handled by the real graph.
SPECIAL_AS_NODES = ("__copy__", "__input__")


def storage_mode(graph: Pregel, mode: str) -> str:
    """Return the mode ``graph`` stores ``messages`` in: delta when its author compiled a ``DeltaChannel``.

    Such a graph (deepagents' agents are) writes delta checkpoints in a
    full-mode process too and reads them back through that channel. Its
    writes carry the delta marker, so that every reader tells them apart
    (a snapshot has no LangGraph counters to go by), and the gate, which
    keeps a plain ``add_messages`` channel from reading a delta list as
    empty, lets the graph read its own threads.
    """
    return "delta" if isinstance(graph.channels.get("messages"), DeltaChannel) else mode


@dataclass(frozen=True)
class HeadRecord:
    """A head checkpoint's id and raw pending writes ``(task_id, channel, value)``, its values not decoded."""

    checkpoint_id: str
    pending_writes: tuple[tuple[str, str, Any], ...]


# What a graph's channels raise when stored values do not fit them, e.g. a
# head whose pending writes its reducer refuses (an ``Overwrite`` saved as a
# value before DeerFlow #4380 was fixed, a user reducer that raises).
UNREADABLE_STATE = (TypeError, ValueError, AttributeError, KeyError, IndexError, InvalidUpdateError)


class UnreadableStateError(Conflict):
    """A checkpoint's values do not fit the graph's channels (409); a state update replacing them repairs it."""

    def __init__(self, thread_id: str, cause: BaseException) -> None:
        super().__init__(
            f"Thread {thread_id}: its state cannot be read ({type(cause).__name__}: {cause}). "
            "Replace the values it cannot read with a state update."
        )


@contextmanager
def _readable(thread_id: str) -> Iterator[None]:
    try:
        yield
    except UNREADABLE_STATE as exc:
        # Logged whole: the same exceptions would come from a bug of ours, answered 409 rather than 500.
        logger.warning("thread %s: its state cannot be read", thread_id, exc_info=True)
        raise UnreadableStateError(thread_id, exc) from exc


class UnknownStateFieldsError(Invalid, ValueError):
    """An update named channels the thread's graph does not have (422)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__("", f"Unknown thread-state field(s): {', '.join(sorted(names))}")


def _checked_messages(name: str, value: Any) -> list[Any]:
    try:
        return stored_messages(value)
    except ValueError as exc:
        raise Invalid(f"values.{name}", f"cannot be stored as messages: {exc}") from None


class StateAccessor:
    """Read and write one graph's thread state through its saver, gated by mode."""

    def __init__(
        self,
        spec: GraphSpec,
        mode: str,
        snapshot_frequency: int,
        *,
        saver,
        store,
        built: Pregel | None = None,
        backend: Backend | None = None,
    ) -> None:
        """``built``: the graph a factory just returned, adapted to ``mode`` (else the cached one).

        ``backend``: the database ``saver`` reads, whose rows the encoded-state
        cache and ``ahead_record`` read directly (None: neither does).
        """
        self.spec = spec
        self.mode = mode
        self.snapshot_frequency = snapshot_frequency
        self.saver = saver
        self.store = store
        self._built = built
        self._state_scope = None
        if backend is not None and backend.kind in ("sqlite", "postgres") and built is None and not STRICT_MSGPACK:
            self._state_scope = (
                backend.kind,
                backend.identity,
                spec.graph_id,
                spec.import_path,
                mode,
                snapshot_frequency,
            )
        if built is None:
            self.graph = graph_cache.bound(spec, mode, snapshot_frequency, saver=saver, store=store)
        else:
            self.graph = built.copy(update={"checkpointer": saver, "store": store})
        self.storage_mode = storage_mode(self.graph, mode)

    def mutation_graph(self, as_node: str) -> Pregel:
        """Return the one-node no-op graph that writes state-only updates as ``as_node``."""
        if self._built is not None:
            return mutation_graph_of(self._built, as_node).copy(
                update={"checkpointer": self.saver, "store": self.store}
            )
        return graph_cache.bound(
            self.spec, self.mode, self.snapshot_frequency, saver=self.saver, store=self.store, mutation_node=as_node
        )

    def _builder(self) -> StateGraph:
        # A graph read for its channel table is a compiled StateGraph (as it always was here:
        # a functional-API graph has no builder, and raises AttributeError as before).
        return cast(CompiledStateGraph, self.graph).builder

    def writable_channels(self) -> set[str]:
        """Return the user channels of the graph (no ``__*`` or ``branch:*`` internals)."""
        return {
            name for name in self._builder().channels if not name.startswith("__") and not name.startswith("branch:")
        }

    def reducer_channels(self) -> set[str]:
        """Return the channels whose writes go through a reducer (replaced via Overwrite)."""
        return {
            name
            for name, channel in self._builder().channels.items()
            if isinstance(channel, (BinaryOperatorAggregate, DeltaChannel))
        }

    def message_channels(self) -> set[str]:
        """Return the channels that fold their writes with ``add_messages`` (full or delta)."""
        return {name for name, channel in self._builder().channels.items() if stores_messages(channel)}

    def replacement_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``values`` and wrap reducer channels so they replace, not append.

        A messages channel gets what ``add_messages`` would have stored (an
        ``Overwrite`` bypasses the reducer, so in full mode strings and dicts
        were saved as such, and every route reading ``.id`` failed on them).
        """
        unknown = [name for name in values if name not in self.writable_channels()]
        if unknown:
            raise UnknownStateFieldsError(unknown)
        reducers = self.reducer_channels()
        messages = self.message_channels()
        replaced = {}
        for name, value in values.items():
            if isinstance(value, Overwrite):
                value = value.value
            if name in messages:
                value = _checked_messages(name, value)
            replaced[name] = Overwrite(value) if name in reducers else value
        return replaced

    def config(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
        checkpoint_ns: str = "",
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunnableConfig:
        """Return the mode-stamped config for a thread; ``metadata`` lands in checkpoint metadata."""
        config = thread_config(thread_id, checkpoint_id, checkpoint_ns)
        if metadata:
            config["metadata"] = dict(metadata)
        return inject_mode(config, self.storage_mode)

    def _checked(self, snapshot: StateSnapshot, checkpoint_id: str | None) -> StateSnapshot:
        if checkpoint_id and snapshot.metadata is None:
            raise CheckpointNotFoundError(checkpoint_id)
        check_metadata(snapshot.metadata, self.storage_mode)
        return snapshot

    def _check_raw(self, checkpoint_tuple) -> None:
        if checkpoint_tuple is not None:
            check_metadata(checkpoint_tuple.metadata, self.storage_mode)

    # -- reads ---------------------------------------------------------------

    def get(
        self, thread_id: str, *, checkpoint_id: str | None = None, checkpoint_ns: str = "", subgraphs: bool = False
    ) -> StateSnapshot:
        """Return the materialized state at the head or at ``checkpoint_id``."""
        config = self.config(thread_id, checkpoint_id, checkpoint_ns)
        try:
            with _readable(thread_id):
                snapshot = self.graph.get_state(config, subgraphs=subgraphs)
        except Exception:
            # A full-mode graph may fail to materialize a delta checkpoint;
            # the mismatch is the real error then.
            self._check_raw(self.saver.get_tuple(config))
            raise
        return self._checked(snapshot, checkpoint_id)

    def _caches_states(self) -> bool:
        return self._state_scope is not None and state_cache.max_bytes() > 0

    def _gated_inputs(self, thread_id: str, **where: Any) -> list[StoredInputs]:
        """Read the rows states are computed from; the mode gate holds for each before anything is answered."""
        assert self._state_scope is not None, "only called when _caches_states()"
        rows = read_inputs(self._state_scope[0], thread_id, **where)
        for inputs in rows:
            check_metadata(json.loads(inputs.metadata), self.storage_mode)
        return rows

    def _state_key(self, thread_id: str, inputs: StoredInputs, *, live: bool) -> tuple:
        assert self._state_scope is not None, "only called when _caches_states()"
        return (*self._state_scope, thread_id, inputs.checkpoint_id, live, inputs.digest)

    def _encoded(
        self, thread_id: str, inputs: StoredInputs, saved, *, live: bool, encoder: StateEncoder, store: bool = True
    ) -> bytes:
        """Return one checkpoint's ThreadState JSON computed from its tuple ``saved`` and ``inputs``' writes.

        ``live``: as a head read answers (finished tasks' writes applied).
        """
        graph = self.graph.copy(update={"checkpointer": PinnedSaver(self.saver, saved, inputs.writes)})
        checkpoint_id = None if live else inputs.checkpoint_id
        with _readable(thread_id):
            snapshot = graph.get_state(self.config(thread_id, checkpoint_id))
        encoded = encoder.state(self._checked(snapshot, checkpoint_id))
        if store:
            state_cache.put(self._state_key(thread_id, inputs, live=live), encoded)
        return encoded

    def encoded_state(
        self, thread_id: str, *, checkpoint_id: str | None = None, checkpoint_ns: str = "", subgraphs: bool = False
    ) -> bytes:
        """Return get()'s ThreadState JSON, from the encoded-state cache where it may be (see state_cache)."""
        if self._caches_states() and not subgraphs and not checkpoint_ns:
            if rows := self._gated_inputs(thread_id, checkpoint_id=checkpoint_id):
                live = not checkpoint_id
                if (encoded := state_cache.get(self._state_key(thread_id, rows[0], live=live))) is not None:
                    return encoded
                if saved := self.saver.get_tuple(thread_config(thread_id, rows[0].checkpoint_id)):
                    return self._encoded(thread_id, rows[0], saved, live=live, encoder=StateEncoder())
        # No checkpoint (an empty state or a 404), or deleted meanwhile: the plain read answers what is there.
        snapshot = self.get(thread_id, checkpoint_id=checkpoint_id, checkpoint_ns=checkpoint_ns, subgraphs=subgraphs)
        return StateEncoder().state(snapshot)

    def encoded_history(
        self,
        thread_id: str,
        *,
        limit: int,
        before: str | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        checkpoint_ns: str = "",
        select: Sequence[str] | None = None,
    ) -> Iterator[bytes]:
        """Return history()'s JSON array in pieces, entries from the encoded-state cache where they may be.

        Every row is read and every entry encoded before the first piece, so a
        failing read is still an error response. A page larger than half the
        cache's bound stores only its newest entries: a scan must not evict
        everything else.
        """
        encoder = StateEncoder()
        with shared_decodes():
            if self._caches_states() and not metadata_filter and not checkpoint_ns and not select:
                page = self._gated_inputs(thread_id, before=before, limit=limit)
                entries = [state_cache.get(self._state_key(thread_id, inputs, live=False)) for inputs in page]
                missed = [inputs for inputs, entry in zip(page, entries, strict=True) if entry is None]
                tuples = self._tuples(thread_id, missed, before=before, limit=limit)
                if all(inputs.checkpoint_id in tuples for inputs in missed):
                    budget = state_cache.max_bytes() // 2 - sum(len(entry) for entry in entries if entry is not None)
                    for index, (inputs, entry) in enumerate(zip(page, entries, strict=True)):
                        if entry is None:
                            saved = tuples[inputs.checkpoint_id]
                            entry = self._encoded(
                                thread_id, inputs, saved, live=False, encoder=encoder, store=budget > 0
                            )
                            entries[index] = entry
                            budget -= len(entry)
                    # Every entry is filled by now; the filter only tells mypy so.
                    return json_array([entry for entry in entries if entry is not None])
                # A checkpoint was deleted since its rows were read: the plain read answers what is there now.
            snapshots = self.history(
                thread_id, limit=limit, before=before, metadata_filter=metadata_filter, checkpoint_ns=checkpoint_ns
            )
        return encoder.states(snapshots, select)

    def _tuples(self, thread_id: str, missed: Sequence[StoredInputs], *, before: str | None, limit: int) -> dict:
        """Return the saver's tuples of the ``missed`` checkpoints by id: one ``list`` for many, else one read each."""
        if len(missed) > BULK_TUPLE_READS:
            config = thread_config(thread_id)
            listed = self.saver.list(config, before=thread_config(thread_id, before) if before else None, limit=limit)
            tuples = {saved.config["configurable"]["checkpoint_id"]: saved for saved in listed}
        else:
            tuples = {}
        for inputs in missed:
            if inputs.checkpoint_id not in tuples:
                # Not listed (a checkpoint written since moved the page) or a few misses.
                if saved := self.saver.get_tuple(thread_config(thread_id, inputs.checkpoint_id)):
                    tuples[inputs.checkpoint_id] = saved
        return tuples

    async def aget(
        self, thread_id: str, *, checkpoint_id: str | None = None, checkpoint_ns: str = "", subgraphs: bool = False
    ) -> StateSnapshot:
        """See get()."""
        config = self.config(thread_id, checkpoint_id, checkpoint_ns)
        try:
            with _readable(thread_id):
                snapshot = await self.graph.aget_state(config, subgraphs=subgraphs)
        except Exception:
            self._check_raw(await self.saver.aget_tuple(config))
            raise
        return self._checked(snapshot, checkpoint_id)

    def history(
        self,
        thread_id: str,
        *,
        limit: int | None,
        before: str | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        checkpoint_ns: str = "",
    ) -> list[StateSnapshot]:
        """Return up to ``limit`` states, newest first, strictly older than ``before``."""
        if limit is not None and limit <= 0:
            return []
        snapshots = []
        with _readable(thread_id):
            for snapshot in self.graph.get_state_history(
                self.config(thread_id, checkpoint_ns=checkpoint_ns),
                filter=dict(metadata_filter) if metadata_filter else None,
                before=thread_config(thread_id, before, checkpoint_ns) if before else None,
                limit=limit,
            ):
                snapshots.append(self._checked(snapshot, None))
        return snapshots

    async def ahistory(
        self,
        thread_id: str,
        *,
        limit: int | None,
        before: str | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        checkpoint_ns: str = "",
    ) -> list[StateSnapshot]:
        """See history()."""
        if limit is not None and limit <= 0:
            return []
        snapshots = []
        with _readable(thread_id):
            async for snapshot in self.graph.aget_state_history(
                self.config(thread_id, checkpoint_ns=checkpoint_ns),
                filter=dict(metadata_filter) if metadata_filter else None,
                before=thread_config(thread_id, before, checkpoint_ns) if before else None,
                limit=limit,
            ):
                snapshots.append(self._checked(snapshot, None))
        return snapshots

    # -- writes --------------------------------------------------------------

    def _update_plan(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        as_node: str | None,
        checkpoint_id: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> tuple[Pregel, RunnableConfig, Any, str | None]:
        config = self.config(thread_id, checkpoint_id, metadata=metadata)
        node = as_node or DEFAULT_MUTATION_NODE
        if node in SPECIAL_AS_NODES:
            return self.graph, config, values, node
        return self.mutation_graph(node), config, self.replacement_values(values or {}), node

    def update(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        *,
        as_node: str | None = None,
        checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunnableConfig:
        """Write ``values`` as a new checkpoint (replacing reducer channels); return its config.

        The head (and the target checkpoint, if named) passes the mode gate
        before anything is written.
        """
        graph, config, update, node = self._update_plan(thread_id, values, as_node, checkpoint_id, metadata)
        self._check_raw(self.saver.get_tuple(thread_config(thread_id)))
        if checkpoint_id:
            target = self.saver.get_tuple(thread_config(thread_id, checkpoint_id))
            if target is None:
                raise CheckpointNotFoundError(checkpoint_id)
            self._check_raw(target)
        return graph.update_state(config, update, as_node=node)

    async def aupdate(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        *,
        as_node: str | None = None,
        checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunnableConfig:
        """See update()."""
        graph, config, update, node = self._update_plan(thread_id, values, as_node, checkpoint_id, metadata)
        self._check_raw(await self.saver.aget_tuple(thread_config(thread_id)))
        if checkpoint_id:
            target = await self.saver.aget_tuple(thread_config(thread_id, checkpoint_id))
            if target is None:
                raise CheckpointNotFoundError(checkpoint_id)
            self._check_raw(target)
        return await graph.aupdate_state(config, update, as_node=node)

    def bulk_update(
        self, thread_id: str, supersteps: Sequence[Sequence[tuple[Mapping[str, Any] | None, str]]]
    ) -> RunnableConfig | None:
        """Write supersteps of ``(values, as_node)`` updates as ``bulk_update_state`` does; return the last config.

        Unlike ``update``, reducers apply: each update is written as its node
        would have written it (the LangGraph Platform's create-with-supersteps).
        Named nodes write through the mutation graph, so no next task is
        scheduled; ``__input__`` and ``__copy__`` through the real graph. The
        mutation graph has one node, so a superstep naming several nodes is
        written node after node. Every channel is checked, and the head
        passes the mode gate, before anything is written.
        """
        channels = self.writable_channels()
        for updates in supersteps:
            for values, node in updates:
                if node not in SPECIAL_AS_NODES and (unknown := [k for k in values or {} if k not in channels]):
                    raise UnknownStateFieldsError(unknown)
        self._check_raw(self.saver.get_tuple(thread_config(thread_id)))
        config = None
        for updates in supersteps:
            for node, group in groupby(updates, key=lambda update: update[1]):
                graph = self.graph if node in SPECIAL_AS_NODES else self.mutation_graph(node)
                step = [StateUpdate(dict(values) if values is not None else None, node) for values, _ in group]
                config = graph.bulk_update_state(self.config(thread_id), [step])
        return config

    def head_tuple(self, thread_id: str, checkpoint_ns: str = ""):
        """Return the raw head CheckpointTuple (for pending writes), gated."""
        checkpoint_tuple = self.saver.get_tuple(thread_config(thread_id, checkpoint_ns=checkpoint_ns))
        self._check_raw(checkpoint_tuple)
        return checkpoint_tuple

    async def ahead_tuple(self, thread_id: str, checkpoint_ns: str = ""):
        """See head_tuple()."""
        checkpoint_tuple = await self.saver.aget_tuple(thread_config(thread_id, checkpoint_ns=checkpoint_ns))
        self._check_raw(checkpoint_tuple)
        return checkpoint_tuple

    async def ahead_record(self, thread_id: str) -> HeadRecord | None:
        """Return the root head's id and pending writes, gated, without decoding its values where rows can be read.

        A run's pre-write gate and rollback capture need the head's metadata,
        id and writes; the saver's tuple decodes every message of the thread
        for them (on a 200-turn thread, a third of the run's decoding). On
        SQLite the rows are read as the encoded-state cache reads them
        (``read_inputs``: the checkpoint's blob is not read) and only the
        writes are decoded. Elsewhere the saver's tuple answers: on
        PostgreSQL the rows' two statements cost a short thread's run more
        than the decode they save (2.8 ms against 1.5 ms in bench.run_costs).
        """
        if self._state_scope is None or self._state_scope[0] != "sqlite":
            saved = await self.ahead_tuple(thread_id)
            if saved is None:
                return None
            return HeadRecord(saved.config["configurable"]["checkpoint_id"], tuple(saved.pending_writes or ()))
        rows = await db_async(self._gated_inputs)(thread_id)
        if not rows:
            return None
        serde = self.saver.serde
        writes = tuple(
            (task_id, channel, serde.loads_typed((kind, value)))
            for _, task_id, _, channel, kind, value in rows[0].writes
        )
        return HeadRecord(rows[0].checkpoint_id, writes)


def _factory_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    config = dict(config or {})
    config["configurable"] = dict(config.get("configurable") or {})
    config.setdefault("metadata", {})
    return config


def state_accessor(
    assistant_id: str, *, access: AccessContext = READ, config: Mapping[str, Any] | None = None
) -> StateAccessor:
    """Return the sync accessor for a thread's graph in this process's mode.

    A factory graph is built for the call with ``access`` (why the server
    asks: read, update, introspect) and ``config``, as on the Platform.
    """
    mode, frequency = process_mode()
    resources = sync_resources()
    spec = resolve_graph(assistant_id)
    built = None
    loaded = load_graph(spec.import_path)
    if loaded.kind == "factory":
        runtime = graph_runtime(access, store=resources.store)
        graph = call_factory(loaded, config=_factory_config(config), runtime=runtime)
        built = adapt_graph(graph, mode, frequency, graph_id=spec.graph_id)
    return StateAccessor(
        spec, mode, frequency, saver=resources.saver, store=resources.store, built=built, backend=resources.backend
    )


async def astate_accessor(
    assistant_id: str,
    *,
    fresh_saver: bool = False,
    access: AccessContext = READ,
    config: Mapping[str, Any] | None = None,
    context: Any = None,
) -> StateAccessor:
    """Return the async accessor; ``fresh_saver`` gives a run its own saver (see runtime).

    A run passes ``access=EXECUTE`` with its config and context, which a
    factory graph receives (the context through its ``ServerRuntime``).
    """
    mode, frequency = process_mode()
    resources = await async_resources()
    saver = resources.new_saver() if fresh_saver else resources.saver
    spec = resolve_graph(assistant_id)
    built = None
    loaded = load_graph(spec.import_path)
    if loaded.kind == "factory":
        runtime = graph_runtime(access, store=resources.store, context=context if access == EXECUTE else None)
        graph = await acall_factory(loaded, config=_factory_config(config), runtime=runtime)
        built = adapt_graph(graph, mode, frequency, graph_id=spec.graph_id)
    return StateAccessor(
        spec, mode, frequency, saver=saver, store=resources.store, built=built, backend=resources.backend
    )
