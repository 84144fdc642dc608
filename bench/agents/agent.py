"""The streaming agent of ``bench.agents``: a fake chat model that streams stamped tokens, a tool call midway.

No Django and no network: ``langgraph dev`` loads this file from a
``langgraph.json`` and ours from ``config.yaml`` ``graphs:``, unchanged.

``agent → tools → agent → END``. The first ``agent`` turn streams half the
tokens and ends with a tool call (``lookup``); the tool answers at once; the
second turn streams the other half and answers without a call. The model is
a ``BaseChatModel`` whose ``_astream`` sleeps ``1/rate`` seconds before each
token, so LangGraph's ``messages`` stream mode (and the protocol-v2
``messages`` channel built from it) sees every token as its own chunk.

Each token's text is ``<index>@<time_ns> ``: its position in the run
(0 … tokens-1, across both turns) and the wall clock (``time.time_ns()``)
when the model yielded it. A follower on the same machine reads the clock
again on arrival: the difference is the token's delivery latency, and the
indices tell a missing, repeated or reordered token.

What a run does comes from ``config.configurable`` (so one server serves any
workload): ``rate`` (tokens/s, default 20), ``seconds`` (the whole answer's
streaming time, default 30, split evenly around the tool call) and
``start_delay`` (seconds before the first token, default 1: time for the
followers to attach before anything is said; a model's time to first token).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

DEFAULTS = {"rate": 20.0, "seconds": 30.0, "start_delay": 1.0}
TOOL_NAME = "lookup"


def settings_of(config: RunnableConfig | None) -> dict[str, float]:
    """The run's ``rate``, ``seconds`` and ``start_delay`` (from ``config.configurable``, else the defaults)."""
    configurable = (config or {}).get("configurable") or {}
    return {key: float(configurable.get(key, default)) for key, default in DEFAULTS.items()}


def token_counts(rate: float, seconds: float) -> tuple[int, int]:
    """Tokens of the first turn (before the tool call) and of the second."""
    total = max(2, round(rate * seconds))
    return total // 2, total - total // 2


def stamp(index: int) -> str:
    return f"{index}@{time.time_ns()} "


def _after_tool(messages: list[BaseMessage]) -> bool:
    """Whether the conversation's last turn already called the tool (so this is the second turn)."""
    return bool(messages) and isinstance(messages[-1], ToolMessage)


class StampingChatModel(BaseChatModel):
    """Streams ``<index>@<time_ns> `` tokens at a set rate; the first turn ends with a tool call."""

    rate: float = DEFAULTS["rate"]
    seconds: float = DEFAULTS["seconds"]
    start_delay: float = DEFAULTS["start_delay"]

    @property
    def _llm_type(self) -> str:
        return "bench-stamping"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("the bench model only streams (astream)")

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        chunk: AIMessageChunk | None = None
        async for part in self._astream(messages, stop, run_manager, **kwargs):
            chunk = part.message if chunk is None else chunk + part.message
        assert chunk is not None
        return ChatResult(generations=[ChatGeneration(message=AIMessage(**chunk.model_dump(exclude={"type"})))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        first, second = token_counts(self.rate, self.seconds)
        second_turn = _after_tool(messages)
        start, count = (first, second) if second_turn else (0, first)
        interval = 1.0 / self.rate
        if not second_turn:
            await asyncio.sleep(self.start_delay)
        # Tokens keep to the schedule (a late wake-up does not push every later token back).
        due = time.monotonic()
        for index in range(start, start + count):
            due += interval
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            yield ChatGenerationChunk(message=AIMessageChunk(content=stamp(index)))
        if not second_turn:
            call = {"name": TOOL_NAME, "args": '{"query": "midway"}', "id": f"call-{start + count}", "index": 0}
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[call]))


@tool(TOOL_NAME)
def lookup(query: str) -> str:
    """Look something up (answers at once)."""
    return f"found {query}"


async def agent(state: MessagesState, config: RunnableConfig) -> dict:
    """One model turn. ``ainvoke``, as an agent calls its model: LangGraph's ``messages`` handler makes
    it stream (``_astream``); a node that called ``astream`` itself would reach the classic ``messages``
    mode but not ``langgraph dev``'s protocol-v2 channel, which takes chat-model events from ``invoke``."""
    model = StampingChatModel(**settings_of(config))
    return {"messages": [await model.ainvoke(state["messages"], config)]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode([lookup]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", END])
builder.add_edge("tools", "agent")
graph = builder.compile()
