"""Helpers for checkpoint tests: explicit-mode accessors and a one-update graph.

The suite's process is frozen ``full`` (tests/config.yaml); delta behaviour is
exercised in-process by building accessors with an explicit mode, exactly as
the process-wide accessor would in a delta process.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, NotRequired

from django.db import connection
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from checkpoints.accessor import StateAccessor, thread_config
from checkpoints.graphs import GraphSpec, resolve_graph
from checkpoints.runtime import sync_resources


class NoopState(TypedDict):
    """Messages plus one plain channel, written only by the caller's input."""

    messages: Annotated[list[BaseMessage], add_messages]
    goal: NotRequired[str]


def _noop(state: NoopState) -> dict[str, Any]:
    return {}


# One invoke = exactly one messages update (the input), unlike lead_agent's two.
noop_builder = StateGraph(NoopState)
noop_builder.add_node("noop", _noop)
noop_builder.add_edge(START, "noop")

NOOP_SPEC = GraphSpec("tests_noop_messages", "tests.checkpoints.support:noop_builder")


def _fold_messages(state: list, writes: list) -> list:
    for write in writes:
        state = add_messages(state, write)
    return state


class OwnDeltaState(TypedDict):
    """``messages`` compiled as a ``DeltaChannel`` by the graph's author, as deepagents' agents are."""

    messages: Annotated[list[BaseMessage], DeltaChannel(_fold_messages, snapshot_frequency=3)]


def _own_delta_noop(state: OwnDeltaState) -> dict[str, Any]:
    return {}


own_delta_builder = StateGraph(OwnDeltaState)
own_delta_builder.add_node("noop", _own_delta_noop)
own_delta_builder.add_edge(START, "noop")

OWN_DELTA_SPEC = GraphSpec("tests_own_delta_messages", "tests.checkpoints.support:own_delta_builder")


def new_thread_id(label: str = "t") -> str:
    return f"{label}-{uuid.uuid4().hex[:12]}"


def accessor(mode: str, frequency: int = 2, *, saver=None, spec: GraphSpec | None = None) -> StateAccessor:
    """Return an accessor in ``mode`` on ``saver`` (default: the process's sync saver)."""
    resources = sync_resources()
    return StateAccessor(
        spec or resolve_graph("lead_agent"),
        mode,
        frequency,
        saver=saver if saver is not None else resources.saver,
        store=resources.store,
    )


def invoke(acc: StateAccessor, thread_id: str, *texts: str) -> None:
    """Run one graph turn per text on the thread."""
    for text in texts:
        acc.graph.invoke({"messages": [HumanMessage(content=text)]}, acc.config(thread_id))


def contents(messages: list[Any]) -> list[str]:
    return [m.content for m in messages]


def state_contents(acc: StateAccessor, thread_id: str, **kwargs) -> list[str]:
    return contents(acc.get(thread_id, **kwargs).values.get("messages", []))


def checkpoint_tuples(saver, thread_id: str) -> list:
    """Return the thread's raw checkpoint tuples, newest first (through the saver API)."""
    return list(saver.list(thread_config(thread_id)))


def head_metadata(saver, thread_id: str) -> dict[str, Any]:
    return dict(saver.get_tuple(thread_config(thread_id)).metadata)


# LangGraph's own tables per backend: Django's flush between tests does not reach them.
LANGGRAPH_TABLES = {
    "sqlite": ("writes", "checkpoints"),
    "postgresql": ("checkpoint_writes", "checkpoint_blobs", "checkpoints"),
}


def empty_checkpoint_tables() -> None:
    """Delete every checkpoint earlier tests left behind, for a test that ranks all threads.

    The storage page's "largest threads" is a ranking over the whole
    database; a big thread another test wrote (and whose ThreadMeta the flush
    removed) would otherwise take the places this test's threads should hold.
    """
    with connection.cursor() as cursor:
        for table in LANGGRAPH_TABLES[connection.vendor]:
            cursor.execute(f"DELETE FROM {table}")


def empty_store() -> None:
    """Delete every Store item earlier tests left behind (the flush does not reach LangGraph's table either)."""
    with connection.cursor() as cursor:
        if "store" in connection.introspection.table_names(cursor):
            cursor.execute("DELETE FROM store")
