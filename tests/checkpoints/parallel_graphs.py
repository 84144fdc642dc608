"""Graphs whose parallel tasks write ``messages`` in one super-step.

LangGraph applies a step's writes in task-path order; a task id is a hash, so
a copy or a restore that drops the path replays those writes in a random
order. The branch names sort the way their messages must come out.

- ``branches``: three parallel nodes, each appending its name;
- ``waiting_branches``: the same three beside ``xray``, which interrupts, so
  the head keeps the three branches' writes pending until it is resumed;
- ``agent`` / ``waiting_agent``: the prebuilt ReAct agent whose model calls
  three tools at once (the waiting one's third tool interrupts).
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

from checkpoints.graphs import GraphSpec

BRANCHES = ("alpha", "bravo", "charlie")


class BranchState(TypedDict):
    """Only messages: every write of a step lands on the one delta channel."""

    messages: Annotated[list[BaseMessage], add_messages]


def _branch(name: str):
    def node(state: BranchState) -> dict[str, Any]:
        return {"messages": [AIMessage(name)]}

    return node


def _xray(state: BranchState) -> dict[str, Any]:
    return {"messages": [AIMessage(f"xray {interrupt('go on?')}")]}


def _builder(*names: str, waiting: bool = False) -> StateGraph:
    builder = StateGraph(BranchState)
    for name in names:
        builder.add_node(name, _branch(name))
        builder.add_edge(START, name)
    if waiting:
        builder.add_node("xray", _xray)
        builder.add_edge(START, "xray")
    return builder


branches = _builder(*BRANCHES)
waiting_branches = _builder(*BRANCHES, waiting=True)


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


@tool
def ask(question: str) -> str:
    """Ask the user."""
    return f"asked {question}: {interrupt(question)}"


class ThreeToolCalls(BaseChatModel):
    """Call ``tools`` at once on a human turn, and answer "done" once their results are in."""

    calls: list[tuple[str, str]]

    @property
    def _llm_type(self) -> str:
        return "three-tool-calls"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ThreeToolCalls:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage("done")
        else:
            tool_calls = [
                {"name": name, "args": {"query" if name == "lookup" else "question": arg}, "id": f"call-{i}"}
                for i, (name, arg) in enumerate(self.calls)
            ]
            message = AIMessage("", tool_calls=tool_calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


def _agent(calls: list[tuple[str, str]]):
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        # create_react_agent is deprecated in favour of langchain's create_agent; the issue names it.
        warnings.simplefilter("ignore")
        return create_react_agent(ThreeToolCalls(calls=calls), [lookup, ask])


agent = _agent([("lookup", "one"), ("lookup", "two"), ("lookup", "three")])
waiting_agent = _agent([("lookup", "one"), ("lookup", "two"), ("ask", "three")])

BRANCHES_SPEC = GraphSpec("tests_parallel_branches", "tests.checkpoints.parallel_graphs:branches")
WAITING_BRANCHES_SPEC = GraphSpec("tests_waiting_branches", "tests.checkpoints.parallel_graphs:waiting_branches")
AGENT_SPEC = GraphSpec("tests_three_tool_agent", "tests.checkpoints.parallel_graphs:agent")
WAITING_AGENT_SPEC = GraphSpec("tests_waiting_tool_agent", "tests.checkpoints.parallel_graphs:waiting_agent")
