"""Registered graphs: lookup by assistant id or name, loading, mode adaptation, compile cache.

Graphs are registered in ``settings.DEERFLOW["GRAPHS"]`` (filled from
``config.yaml``'s ``graphs:`` and ``langgraph_json:``, see
``deerflow_site.graph_sources``) by langgraph.json's import syntax. A path
names one of three things, told apart when it is first loaded:

- a ``StateGraph`` builder: compiled here;
- a compiled graph: used as compiled, so its name, ``interrupt_before/after``,
  ``debug``, ``with_config`` defaults (``recursion_limit``…) and stream
  settings are kept;
- a factory (0 arguments, ``(config)``, ``(runtime)`` or ``(config, runtime)``,
  sync or async), called per run with the run's config and a
  ``langgraph_sdk.runtime`` ``ServerRuntime``, as the LangGraph Platform does.

Every graph gets this process's channel mode: in delta mode each
``add_messages`` channel becomes a ``DeltaChannel`` over our batch reducer,
at the frozen cadence, in the graph's channel table (the rest is untouched).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import logging
import os
import sys
import threading
import typing
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from asgiref.sync import async_to_sync
from django.conf import settings
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.types import Overwrite

from checkpoints.errors import GraphLoadError, UnknownGraphError
from checkpoints.reducer import merge_message_writes
from checkpoints.state_cache import state_cache
from core.module_files import module_from_file

if TYPE_CHECKING:
    from langgraph_sdk.runtime import AccessContext

logger = logging.getLogger(__name__)

# langgraph-api's namespace for system assistants: uuid5(NS, graph_id) gives
# the same assistant id here as on the LangGraph Platform (046b5dc7-… for "echo").
# The built-in demo agent's graph id: what a thread runs when nothing says otherwise.
DEFAULT_GRAPH_ID = "lead_agent"

NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")

# Why the server asks a factory for a graph (langgraph_sdk.runtime.AccessContext).
EXECUTE: AccessContext = "threads.create_run"
READ: AccessContext = "threads.read"
UPDATE: AccessContext = "threads.update"
INTROSPECT: AccessContext = "assistants.read"


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


def registered_graph(assistant_id_or_name: str) -> GraphSpec | None:
    """Return the graph an assistant id (uuid5) or a graph name refers to, else None."""
    graphs = registered_graphs()
    if spec := graphs.get(assistant_id_or_name):
        return spec
    return next((spec for spec in graphs.values() if spec.assistant_id == assistant_id_or_name), None)


def resolve_graph(assistant_id_or_name: str) -> GraphSpec:
    """``registered_graph``, or ``UnknownGraphError`` (404)."""
    if (spec := registered_graph(assistant_id_or_name)) is None:
        raise UnknownGraphError(assistant_id_or_name)
    return spec


# -- loading ----------------------------------------------------------------

_import_lock = threading.RLock()


def _prepare_imports() -> None:
    """Put the configured dependency folders on the import path and the graphs' env in place.

    Appended, not prepended: a user folder must not shadow this project's own
    packages. langgraph.json's ``env`` never overrides the real environment.
    """
    for folder in settings.DEERFLOW.get("GRAPH_DEPENDENCIES", ()):
        if folder not in sys.path:
            sys.path.append(folder)
    for key, value in settings.DEERFLOW.get("GRAPH_ENV", {}).items():
        os.environ.setdefault(key, value)


def _module_from_file(path: Path) -> Any:
    """Import a graph file under a name derived from its path (the same in every process).

    The serializer revives pydantic/dataclass state by module name, so a run
    worker must find the same module name a server wrote.
    """
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"deerflow_graph_{path.stem}_{digest}"
    if name not in sys.modules and not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return module_from_file(path, name)


def _import_target(import_path: str) -> Any:
    target, _, attr = import_path.rpartition(":")
    with _import_lock:
        _prepare_imports()
        if target.endswith(".py") or target.startswith("/"):
            module = _module_from_file(Path(target))
        else:
            module = import_module(target)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AttributeError(f"{target} has no attribute {attr!r}") from None


@dataclass(frozen=True)
class LoadedGraph:
    """What an import path named: a builder, a compiled graph, or a factory of either."""

    kind: str  # "builder" | "compiled" | "factory"
    target: Any
    # For factories: which keyword names get the config and the runtime.
    config_param: str | None = None
    runtime_param: str | None = None


def _is_runtime_annotation(annotation: Any) -> bool:
    from langgraph_sdk.runtime import ServerRuntime, _ExecutionRuntime, _ReadRuntime

    if annotation is ServerRuntime or typing.get_origin(annotation) is ServerRuntime:
        return True
    if isinstance(annotation, type):
        return issubclass(annotation, (_ExecutionRuntime, _ReadRuntime))
    args = typing.get_args(annotation)  # Annotated[ServerRuntime, ...]
    return bool(args) and _is_runtime_annotation(args[0])


def _factory_params(fn: Callable) -> tuple[str | None, str | None]:
    """Return (config parameter, runtime parameter) of a factory, as the Platform classifies them.

    The runtime is the parameter annotated ``ServerRuntime`` (string
    annotations under TYPE_CHECKING included), or else the one named
    ``runtime``; any other single parameter gets the config.
    """
    from langchain_core.runnables import RunnableConfig
    from langgraph_sdk.runtime import ServerRuntime

    params = list(inspect.signature(fn).parameters.values())
    try:
        hints = typing.get_type_hints(fn, localns={"ServerRuntime": ServerRuntime, "RunnableConfig": RunnableConfig})
    except Exception:
        hints = {}
    runtime = [p.name for p in params if _is_runtime_annotation(hints.get(p.name, p.annotation))]
    if not runtime:
        runtime = [p.name for p in params if p.name == "runtime"]
    others = [p.name for p in params if p.name not in runtime]
    if len(params) > 2 or len(runtime) > 1 or len(others) > 1:
        raise TypeError(
            f"a graph factory takes no argument, (config), (runtime: ServerRuntime) or (config, runtime); "
            f"got ({', '.join(p.name for p in params)})"
        )
    return (others[0] if others else None), (runtime[0] if runtime else None)


@cache
def load_graph(import_path: str) -> LoadedGraph:
    """Import ``import_path`` once and classify it; raise GraphLoadError saying why it cannot serve."""
    try:
        target = _import_target(import_path)
        if isinstance(target, StateGraph):
            return LoadedGraph("builder", target)
        if isinstance(target, Pregel):
            return LoadedGraph("compiled", target)
        if callable(target):
            config_param, runtime_param = _factory_params(target)
            return LoadedGraph("factory", target, config_param, runtime_param)
        raise TypeError(f"{type(target).__name__} is not a StateGraph, a compiled graph or a factory of one")
    except Exception as exc:
        raise GraphLoadError(import_path, exc) from exc


def graph_runtime(access: AccessContext, *, store, context: Any = None, user: Any = None) -> Any:
    """Return the ``ServerRuntime`` a factory gets: the execution variant for runs, else the read one."""
    from langgraph_sdk.runtime import _ExecutionRuntime, _ReadRuntime

    if access == EXECUTE:
        return _ExecutionRuntime(access_context=access, user=user, store=store, context=copy.copy(context))
    return _ReadRuntime(access_context=access, user=user, store=store)


def _factory_kwargs(loaded: LoadedGraph, config: dict[str, Any], runtime: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if loaded.config_param:
        kwargs[loaded.config_param] = config
    if loaded.runtime_param:
        kwargs[loaded.runtime_param] = runtime
    return kwargs


async def _awaited(value: Any) -> Any:
    return await value


def call_factory(loaded: LoadedGraph, *, config: dict[str, Any], runtime: Any) -> Any:
    """Call a factory from sync code (an async one runs to completion on the loop)."""
    value = loaded.target(**_factory_kwargs(loaded, config, runtime))
    return async_to_sync(_awaited)(value) if inspect.isawaitable(value) else value


async def acall_factory(loaded: LoadedGraph, *, config: dict[str, Any], runtime: Any) -> Any:
    """Call a factory from async code; a sync factory runs inline (it only builds a graph)."""
    value = loaded.target(**_factory_kwargs(loaded, config, runtime))
    return await value if inspect.isawaitable(value) else value


def _is_messages_channel(channel: Any) -> bool:
    return isinstance(channel, BinaryOperatorAggregate) and channel.operator is add_messages


def stores_messages(channel: Any) -> bool:
    """Tell whether ``channel`` folds its writes with ``add_messages`` (in either mode)."""
    return _is_messages_channel(channel) or (
        isinstance(channel, DeltaChannel) and channel.reducer is merge_message_writes
    )


def _swap_messages_channels(channels: dict[str, Any], snapshot_frequency: int) -> dict[str, Any]:
    return {
        name: DeltaChannel(merge_message_writes, list, snapshot_frequency=snapshot_frequency)
        if _is_messages_channel(channel)
        else channel
        for name, channel in channels.items()
    }


def adapt_builder(builder: StateGraph, mode: str, snapshot_frequency: int) -> StateGraph:
    """Return ``builder`` with every messages channel stored the ``mode`` way.

    Full mode returns the builder itself. Delta mode returns a shallow copy
    whose channel tables (the graph's and each schema's) hold a ``DeltaChannel``
    in place of each ``add_messages`` channel; nodes and edges are shared.
    """
    if mode == "full":
        return builder
    adapted = copy.copy(builder)
    adapted.channels = _swap_messages_channels(builder.channels, snapshot_frequency)
    adapted.schemas = {
        schema: _swap_messages_channels(channels, snapshot_frequency) for schema, channels in builder.schemas.items()
    }
    return adapted


def adapt_graph(graph: Any, mode: str, snapshot_frequency: int, *, graph_id: str) -> Pregel:
    """Return ``graph`` compiled and stored the ``mode`` way.

    A builder is compiled here. A compiled graph stays the object its author
    compiled (interrupts, debug, ``with_config`` defaults, stream settings,
    retry and cache policies): delta mode only swaps entries of its channel
    table (and of its builder's, which state-only writes use), since the
    runtime reads channels by name from that table. An unnamed graph is named
    after its graph id, as on the Platform.
    """
    if isinstance(graph, StateGraph):
        return adapt_builder(graph, mode, snapshot_frequency).compile(name=graph_id)
    if not isinstance(graph, Pregel):
        raise TypeError(f"{type(graph).__name__} is not a StateGraph or a compiled graph")
    update: dict[str, Any] = {}
    if graph.name == "LangGraph":  # compile()'s default name
        update["name"] = graph_id
    if mode == "delta" and any(_is_messages_channel(c) for c in graph.channels.values()):
        update["channels"] = _swap_messages_channels(graph.channels, snapshot_frequency)
        if isinstance(graph, CompiledStateGraph):
            update["builder"] = adapt_builder(graph.builder, mode, snapshot_frequency)
    return graph.copy(update=update) if update else graph


def adaptation_notes(graph: Pregel, mode: str) -> list[str]:
    """Say what delta mode cannot store as a ``DeltaChannel`` in ``graph`` (empty in full mode)."""
    if mode != "delta":
        return []
    notes = [
        f"channel {name!r} uses the reducer {getattr(channel.operator, '__name__', channel.operator)!r}, "
        "not add_messages, so it stays a full channel"
        for name, channel in graph.channels.items()
        if name == "messages" and isinstance(channel, BinaryOperatorAggregate) and not _is_messages_channel(channel)
    ]
    try:
        subgraphs = list(graph.get_subgraphs(recurse=True))
    except Exception:  # a graph that cannot list its subgraphs has none we could adapt either
        subgraphs = []
    notes += [
        f"subgraph {namespace!r} keeps its add_messages channels in full mode (only the top-level graph is adapted)"
        for namespace, subgraph in subgraphs
        # get_subgraphs() is typed by the protocol; a compiled graph's subgraphs are compiled graphs.
        if any(_is_messages_channel(c) for c in cast(Pregel, subgraph).channels.values())
    ]
    return notes


def _noop(state: Any) -> dict[str, Any]:
    return {}


class ReplaceableAggregate(BinaryOperatorAggregate):
    """A reducer channel that a state-only ``Overwrite`` replaces even while it is still empty.

    LangGraph 1.2.24's ``BinaryOperatorAggregate.update`` stores the first
    write into an empty channel as is, so ``Overwrite([])`` into a field typed
    ``list[str] | None`` (no default value, hence empty until written) saved
    the wrapper itself: the next run failed on ``Overwrite + list`` and every
    state read applying its writes answered 500 (DeerFlow #4380).
    """

    def update(self, values: Sequence[Any]) -> bool:
        if values and not self.is_available() and isinstance(values[0], Overwrite):
            # A placeholder the Overwrite replaces before anything reads it.
            self.value = None
        return super().update(values)


def _replaceable(channel: Any) -> Any:
    if type(channel) is not BinaryOperatorAggregate:
        return channel
    replaceable = ReplaceableAggregate(channel.typ, channel.operator)
    replaceable.key = channel.key
    return replaceable


def _replaceable_channels(channels: dict[str, Any]) -> dict[str, Any]:
    return {name: _replaceable(channel) for name, channel in channels.items()}


def build_mutation_builder(builder: StateGraph, as_node: str) -> StateGraph:
    """Return a one-node graph with ``builder``'s channel table whose node does nothing.

    ``update_state(..., as_node)`` through it writes values with the same
    reducers, channels and mode markers as the real graph, but schedules no
    next task, so the new head stays idle. Its channels are the thread's
    effective ones: a base schema would silently drop unknown channels.
    """
    mutation = StateGraph(builder.state_schema, context_schema=builder.context_schema)
    mutation.channels = _replaceable_channels(builder.channels)
    mutation.managed = dict(builder.managed)
    mutation.schemas = {schema: _replaceable_channels(channels) for schema, channels in builder.schemas.items()}
    mutation.add_node(as_node, _noop)
    mutation.set_entry_point(as_node)
    mutation.set_finish_point(as_node)
    return mutation


def mutation_graph_of(graph: Pregel, as_node: str) -> Pregel:
    """Return the state-only twin of a compiled graph (the graph itself when it has no builder)."""
    builder = getattr(graph, "builder", None)
    if not isinstance(builder, StateGraph):
        return graph  # a functional-API graph: LangGraph's own update_state semantics
    return build_mutation_builder(builder, as_node).compile(name=graph.name)


class GraphCache:
    """Compiled graphs per (graph, mode, cadence), cleared wholesale at the cap.

    Compiling costs milliseconds; binding a saver and Store to a cached
    compiled graph is a cheap ``copy`` (a Postgres run gets its own saver).
    Factories are not cached: they are called per run, as on the Platform.
    """

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str, str, int, str | None], Pregel] = {}
        self._lock = threading.Lock()

    def compiled(
        self, spec: GraphSpec, mode: str, snapshot_frequency: int, *, mutation_node: str | None = None
    ) -> Pregel:
        """Return the graph compiled for ``mode`` (or its state-only mutation twin)."""
        key = (spec.graph_id, spec.import_path, mode, snapshot_frequency, mutation_node)
        with self._lock:
            if (graph := self._compiled.get(key)) is None:
                cap = settings.DEERFLOW_CONFIG.database.checkpoint_graph_cache.accessor_graph_max
                if len(self._compiled) >= cap:
                    self._compiled.clear()
                loaded = load_graph(spec.import_path)
                if loaded.kind == "factory":
                    raise TypeError(f"graph {spec.graph_id!r} is a factory: it is built per call, not cached")
                graph = adapt_graph(loaded.target, mode, snapshot_frequency, graph_id=spec.graph_id)
                if mutation_node is not None:
                    graph = mutation_graph_of(graph, mutation_node)
                self._compiled[key] = graph
            return graph

    def bound(
        self, spec: GraphSpec, mode: str, snapshot_frequency: int, *, saver, store, mutation_node: str | None = None
    ) -> Pregel:
        """Return the compiled graph bound to ``saver`` and ``store``."""
        graph = self.compiled(spec, mode, snapshot_frequency, mutation_node=mutation_node)
        return graph.copy(update={"checkpointer": saver, "store": store})

    def clear(self) -> None:
        with self._lock:
            self._compiled.clear()
        # A graph compiled again may differ (tests re-register graph ids); states encoded for the old one go.
        state_cache.clear()


graph_cache = GraphCache()


def channel_table(spec: GraphSpec, mode: str, snapshot_frequency: int) -> dict[str, Any]:
    """Return the graph's channels in ``mode`` (a factory is asked as for a state read)."""
    loaded = load_graph(spec.import_path)
    if loaded.kind != "factory":
        return graph_cache.compiled(spec, mode, snapshot_frequency).channels
    # At module level a circle: the runtime builds its savers from this registry.
    from checkpoints.runtime import sync_resources

    runtime = graph_runtime(READ, store=sync_resources().store)
    graph = call_factory(loaded, config={"configurable": {}, "metadata": {}}, runtime=runtime)
    return adapt_graph(graph, mode, snapshot_frequency, graph_id=spec.graph_id).channels


def graph_problems(mode: str) -> list[tuple[str, bool, str]]:
    """Return (graph id, is_error, message) for every graph that fails to load or to adapt to ``mode``.

    For the system check and the serve-time start-up log. A factory is only
    loaded (its graph depends on the run's config), not called.
    """
    problems: list[tuple[str, bool, str]] = []
    for spec in registered_graphs().values():
        try:
            loaded = load_graph(spec.import_path)
            if loaded.kind == "factory":
                continue
            graph = adapt_graph(
                loaded.target,
                mode,
                settings.DEERFLOW_CONFIG.database.checkpoint_delta.snapshot_frequency,
                graph_id=spec.graph_id,
            )
        except Exception as exc:
            problems.append((spec.graph_id, True, f"Graph {spec.graph_id!r} ({spec.import_path}) does not load: {exc}"))
            continue
        problems += [
            (spec.graph_id, False, f"Graph {spec.graph_id!r} cannot be fully adapted to delta mode: {note}")
            for note in adaptation_notes(graph, mode)
        ]
    return problems


def log_graph_problems() -> None:
    """Log, at serve time, each graph that cannot load (error) or adapt fully (warning)."""
    mode = settings.DEERFLOW_CONFIG.database.checkpoint_channel_mode
    for _, is_error, message in graph_problems(mode):
        (logger.error if is_error else logger.warning)(message)
