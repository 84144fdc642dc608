"""Graphs the run-machinery tests register next to the demo agent."""

from __future__ import annotations

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import START, MessagesState, StateGraph

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
