"""Registered graphs: lookup by assistant id or name, mode adaptation, compile cache.

Graphs are registered in ``settings.DEERFLOW["GRAPHS"]`` by import path, like
``langgraph.json``. A path names a ``StateGraph`` builder, a compiled graph
(its builder is used) or a zero-argument factory returning either. The server
compiles every graph itself, so each one gets this process's channel mode: in
delta mode every ``add_messages`` channel becomes a ``DeltaChannel`` over our
batch reducer, at the frozen cadence.
"""

from __future__ import annotations

import copy
import threading
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any

from django.conf import settings
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph

from checkpoints.errors import UnknownGraphError
from checkpoints.reducer import merge_message_writes

# langgraph-api's namespace for system assistants: uuid5(NS, graph_id) gives
# the same assistant id here as on the LangGraph Platform (046b5dc7-… for "echo").
# The built-in demo agent's graph id: what a thread runs when nothing says otherwise.
DEFAULT_GRAPH_ID = "lead_agent"

NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


@dataclass(frozen=True)
class GraphSpec:
    """A registered graph and its system assistant."""

    graph_id: str
    import_path: str

    @property
    def assistant_id(self) -> str:
        return str(uuid.uuid5(NAMESPACE_GRAPH, self.graph_id))


def registered_graphs() -> dict[str, GraphSpec]:
    """Return the registered graphs by graph id, in settings order."""
    return {gid: GraphSpec(gid, path) for gid, path in settings.DEERFLOW["GRAPHS"].items()}


def resolve_graph(assistant_id_or_name: str) -> GraphSpec:
    """Return the graph an assistant id (uuid5) or a graph name refers to."""
    graphs = registered_graphs()
    if spec := graphs.get(assistant_id_or_name):
        return spec
    for spec in graphs.values():
        if spec.assistant_id == assistant_id_or_name:
            return spec
    raise UnknownGraphError(assistant_id_or_name)


@cache
def _load_builder(import_path: str) -> StateGraph:
    module_name, _, attr = import_path.partition(":")
    target: Any = getattr(import_module(module_name), attr)
    if callable(target) and not isinstance(target, (StateGraph, CompiledStateGraph)):
        target = target()
    if isinstance(target, CompiledStateGraph):
        target = target.builder
    if not isinstance(target, StateGraph):
        raise TypeError(f"{import_path} is not a StateGraph, a compiled graph or a factory of one")
    return target


def _is_messages_channel(channel: Any) -> bool:
    return isinstance(channel, BinaryOperatorAggregate) and channel.operator is add_messages


def adapt_builder(builder: StateGraph, mode: str, snapshot_frequency: int) -> StateGraph:
    """Return ``builder`` with every messages channel stored the ``mode`` way.

    Full mode returns the builder itself. Delta mode returns a shallow copy
    whose channel tables (the graph's and each schema's) hold a ``DeltaChannel``
    in place of each ``add_messages`` channel; nodes and edges are shared.
    """
    if mode == "full":
        return builder

    def swap(channels: dict[str, Any]) -> dict[str, Any]:
        return {
            name: DeltaChannel(merge_message_writes, list, snapshot_frequency=snapshot_frequency)
            if _is_messages_channel(channel)
            else channel
            for name, channel in channels.items()
        }

    adapted = copy.copy(builder)
    adapted.channels = swap(builder.channels)
    adapted.schemas = {schema: swap(channels) for schema, channels in builder.schemas.items()}
    return adapted


def _noop(state: Any) -> dict[str, Any]:
    return {}


def build_mutation_builder(builder: StateGraph, as_node: str) -> StateGraph:
    """Return a one-node graph with ``builder``'s channel table whose node does nothing.

    ``update_state(..., as_node)`` through it writes values with the same
    reducers, channels and mode markers as the real graph, but schedules no
    next task, so the new head stays idle. Its channels are the thread's
    effective ones: a base schema would silently drop unknown channels.
    """
    mutation = StateGraph(builder.state_schema, context_schema=builder.context_schema)
    mutation.channels = dict(builder.channels)
    mutation.managed = dict(builder.managed)
    mutation.schemas = dict(builder.schemas)
    mutation.add_node(as_node, _noop)
    mutation.set_entry_point(as_node)
    mutation.set_finish_point(as_node)
    return mutation


class GraphCache:
    """Compiled graphs per (graph, mode, cadence), cleared wholesale at the cap.

    Compiling costs milliseconds; binding a saver and Store to a cached
    compiled graph is a cheap ``copy`` (a Postgres run gets its own saver).
    """

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str, int, str | None], CompiledStateGraph] = {}
        self._lock = threading.Lock()

    def compiled(
        self, spec: GraphSpec, mode: str, snapshot_frequency: int, *, mutation_node: str | None = None
    ) -> CompiledStateGraph:
        """Return the graph compiled for ``mode`` (or its state-only mutation twin)."""
        key = (spec.graph_id, mode, snapshot_frequency, mutation_node)
        with self._lock:
            if (graph := self._compiled.get(key)) is None:
                cap = settings.DEERFLOW_CONFIG.database.checkpoint_graph_cache.accessor_graph_max
                if len(self._compiled) >= cap:
                    self._compiled.clear()
                builder = adapt_builder(_load_builder(spec.import_path), mode, snapshot_frequency)
                if mutation_node is not None:
                    builder = build_mutation_builder(builder, mutation_node)
                graph = self._compiled[key] = builder.compile(name=spec.graph_id)
            return graph

    def bound(
        self, spec: GraphSpec, mode: str, snapshot_frequency: int, *, saver, store, mutation_node: str | None = None
    ) -> CompiledStateGraph:
        """Return the compiled graph bound to ``saver`` and ``store``."""
        graph = self.compiled(spec, mode, snapshot_frequency, mutation_node=mutation_node)
        return graph.copy(update={"checkpointer": saver, "store": store})

    def clear(self) -> None:
        with self._lock:
            self._compiled.clear()


graph_cache = GraphCache()
