"""Graphs the run-machinery tests register next to the demo agent."""

from __future__ import annotations

import json
from dataclasses import dataclass

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.runtime import Runtime

# A NUL (PostgreSQL refuses it in text and jsonb) and a lone surrogate
# (SQLite's UTF-8 encoder raises on it): what a model may well emit.
UNSTORABLE_REPLY = "bad\x00reply\ud800end"


def _reply(state: MessagesState) -> dict:
    model = FakeListChatModel(responses=[UNSTORABLE_REPLY])
    return {"messages": [model.invoke(state["messages"])]}


unstorable_builder = StateGraph(MessagesState)
unstorable_builder.add_node("reply", _reply)
unstorable_builder.add_edge(START, "reply")
unstorable = unstorable_builder


@dataclass
class ReportContext:
    tone: str = "plain"
    lang: str = "en"


def _report(state: MessagesState, config: RunnableConfig, runtime: Runtime[ReportContext]) -> dict:
    """Answer with what the run was configured with: assistant settings merged under the run's."""
    configurable = config["configurable"]
    seen = {
        "model": configurable.get("model"),
        "temperature": configurable.get("temperature"),
        "tone": runtime.context.tone,
        "lang": runtime.context.lang,
        "tags": sorted(config.get("tags") or []),
    }
    return {"messages": [AIMessage(content=json.dumps(seen, sort_keys=True))]}


# Reports its configurable, context and tags (assistant merge tests).
configured = StateGraph(MessagesState, context_schema=ReportContext)
configured.add_node("report", _report)
configured.add_edge(START, "report")


def _noop(state: MessagesState) -> dict:
    return {}


_grandchild = StateGraph(MessagesState)
_grandchild.add_node("leaf", _noop)
_grandchild.add_edge(START, "leaf")
_child = StateGraph(MessagesState)
_child.add_node("grandchild", _grandchild.compile())
_child.add_edge(START, "grandchild")
# Two levels of subgraphs (the subgraphs route's recurse and namespace tests).
nested = StateGraph(MessagesState)
nested.add_node("child", _child.compile())
nested.add_edge(START, "child")


# A tool call and a subgraph that streams: what the protocol's tools,
# subgraph lifecycle and namespaced messages are made of.
def _plan(state: MessagesState) -> dict:
    from langchain_core.messages import AIMessage

    call = {"name": "lookup", "args": {"query": "v3"}, "id": "tc-1", "type": "tool_call"}
    return {"messages": [AIMessage(content="", id="plan-1", tool_calls=[call])]}


def _lookup_tool():
    from langchain_core.tools import tool

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    return lookup


def _inner(state: MessagesState) -> dict:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    model = GenericFakeChatModel(messages=iter([AIMessage(content="sub says hi", id="sub-1")]))
    return {"messages": [model.invoke(state["messages"])]}


def _agentic():
    from langgraph.prebuilt import ToolNode

    sub = StateGraph(MessagesState)
    sub.add_node("inner", _inner)
    sub.add_edge(START, "inner")
    builder = StateGraph(MessagesState)
    builder.add_node("plan", _plan)
    builder.add_node("tools", ToolNode([_lookup_tool()]))
    builder.add_node("sub", sub.compile())
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", "sub")
    return builder


agentic = _agentic()


def _ask_inside(state: MessagesState) -> dict:
    from langchain_core.messages import AIMessage
    from langgraph.types import interrupt

    answer = interrupt({"question": "from the subgraph?"})
    return {"messages": [AIMessage(content=f"sub got: {answer}")]}


def _asking_parent():
    sub = StateGraph(MessagesState)
    sub.add_node("ask", _ask_inside)
    sub.add_edge(START, "ask")
    builder = StateGraph(MessagesState)
    builder.add_node("delegate", sub.compile())
    builder.add_edge(START, "delegate")
    return builder


# An interrupt raised inside a subgraph (protocol v2's non-root input.respond).
asking_parent = _asking_parent()
