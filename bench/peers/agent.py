"""The bench's graph: ``echo: <last human text>``, the demo agent's contract without Django.

``runs/demo_agent.py`` imports Django (its Store helpers), so ``langgraph dev``
cannot load it; both servers serve this file instead, unchanged. One node
over ``MessagesState`` answers the last human message, so a turn writes the
same checkpoints on both sides.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph


def echo(state: MessagesState) -> dict:
    """Answer the last human message."""
    humans = [m for m in state["messages"] if isinstance(m, HumanMessage)]
    text = humans[-1].content if humans else ""
    return {"messages": [AIMessage(content=f"echo: {text}")]}


builder = StateGraph(MessagesState)
builder.add_node("echo", echo)
builder.add_edge(START, "echo")
graph = builder.compile()
