"""The built-in ``lead_agent``: a real LangGraph graph with a scripted chat model.

No LLM and no network: for a human message ``text`` it streams ``echo: text``
token by token through a LangChain chat model (so ``messages`` streaming, token
usage and callbacks behave as with a real model). Commands in the text drive
every server path deterministically:

- ``/slow S``: stream the reply over about S seconds (cancel and disconnect tests);
- ``/fail``: raise ``RuntimeError("demo failure requested")``;
- ``/interrupt``: ``interrupt({"question": "approve?"})``; resumed with V, reply ``resumed: V``;
- ``/review TEXT``: ask a person to approve, edit or reject sending TEXT, as LangChain's
  ``HumanInTheLoopMiddleware`` asks (the request shape the Agent Chat UI's inbox
  answers with Approve / Edit / Reject); the reply says what was decided;
- ``/image``: first add a hidden message carrying a ``data:`` image block;
- every turn also emits one custom stream event ``{"status": "replying", "to": …}``;
- ``/remember TEXT``: keep TEXT in the Store for the run's user (reply ``noted: TEXT``);
- ``/recall``: reply ``remembered: a; b`` (or ``remembered: nothing``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, NotRequired

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.base.id import uuid6
from langgraph.config import get_config, get_store, get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.base import SearchItem
from langgraph.types import interrupt
from typing_extensions import TypedDict

from store.selectors import astore_item_search, store_item_search, store_user_id_from_config
from store.services import astore_item_put, store_item_put

MODEL_NAME = "demo-echo"
TITLE_LENGTH = 50
# A 1x1 transparent PNG.
PIXEL_DATA_URL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
_SLOW = re.compile(r"^/slow\s+(\d+(?:\.\d+)?)")


class AgentState(TypedDict):
    """Conversation state: the messages and a title set on the first turn."""

    messages: Annotated[list[AnyMessage], add_messages]
    title: NotRequired[str]


def message_text(message: BaseMessage) -> str:
    """Return the plain text of a message whose content is a string or blocks."""
    if isinstance(message.content, str):
        return message.content
    return " ".join(
        block.get("text", "") if isinstance(block, dict) else str(block) for block in message.content
    ).strip()


def _tokens(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [text]


class DemoChatModel(BaseChatModel):
    """A deterministic streaming chat model.

    It answers ``echo: <last human text>``, or exactly the text of a trailing
    SystemMessage (how the graph scripts replies such as ``resumed: V``).
    """

    @property
    def _llm_type(self) -> str:
        return MODEL_NAME

    def _script(self, messages: list[BaseMessage]) -> tuple[str, int, float]:
        """Return (reply, input tokens, seconds per token)."""
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        prompt = message_text(humans[-1]) if humans else ""
        last = messages[-1] if messages else None
        reply = message_text(last) if isinstance(last, SystemMessage) else f"echo: {prompt}"
        slow = _SLOW.match(prompt)
        delay = float(slow.group(1)) / len(_tokens(reply)) if slow else 0.0
        return reply, len(prompt.split()), delay

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[tuple[AIMessageChunk, float]]:
        reply, input_tokens, delay = self._script(messages)
        tokens = _tokens(reply)
        for index, token in enumerate(tokens):
            last = index == len(tokens) - 1
            extra: dict[str, Any] = {}
            if last:
                output_tokens = len(reply.split())
                extra = {
                    "usage_metadata": {
                        "input_tokens": input_tokens,
                        "output_tokens": output_tokens,
                        "total_tokens": input_tokens + output_tokens,
                    },
                    "response_metadata": {"model_name": MODEL_NAME, "finish_reason": "stop"},
                    "chunk_position": "last",
                }
            yield AIMessageChunk(content=token, **extra), delay

    def _generate(
        self, messages, stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs
    ) -> ChatResult:
        merged = None
        for chunk in self._stream(messages, stop, run_manager, **kwargs):
            merged = chunk if merged is None else merged + chunk
        assert merged is not None, "the demo model streams at least one chunk"
        message = AIMessage(
            **{
                k: v
                for k, v in merged.message.model_dump().items()
                if k not in {"type", "tool_call_chunks", "chunk_position"}
            }
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self, messages, stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs
    ) -> Iterator[ChatGenerationChunk]:
        for chunk, delay in self._chunks(messages):
            if delay:
                time.sleep(delay)
            generation = ChatGenerationChunk(message=chunk)
            if run_manager:
                run_manager.on_llm_new_token(str(chunk.content), chunk=generation)
            yield generation

    async def _astream(
        self, messages, stop=None, run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk, delay in self._chunks(messages):
            if delay:
                await asyncio.sleep(delay)
            generation = ChatGenerationChunk(message=chunk)
            if run_manager:
                await run_manager.on_llm_new_token(str(chunk.content), chunk=generation)
            yield generation


model = DemoChatModel()


def _hidden_image_message() -> HumanMessage:
    return HumanMessage(
        content=[
            {"type": "text", "text": "Here is the image you asked to view."},
            {"type": "image_url", "image_url": {"url": PIXEL_DATA_URL}},
        ],
        additional_kwargs={"hide_from_ui": True},
    )


def _last_human_text(state: AgentState) -> str:
    humans = [m for m in state.get("messages") or [] if isinstance(m, HumanMessage)]
    return message_text(humans[-1]).strip() if humans else ""


def _turn(state: AgentState) -> tuple[dict[str, Any], list[BaseMessage], list[BaseMessage]]:
    """Return (update, new messages, model prompt) for a turn, obeying the commands."""
    messages = state.get("messages") or []
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    text = _last_human_text(state)
    update: dict[str, Any] = {}
    if not state.get("title") and humans:
        update["title"] = message_text(humans[0])[:TITLE_LENGTH]
    new: list[BaseMessage] = []
    prompt: list[BaseMessage] = list(messages)
    # A custom stream event, so clients can see stream_mode="custom" work.
    get_stream_writer()({"status": "replying", "to": text[:TITLE_LENGTH]})
    if text.startswith("/fail"):
        raise RuntimeError("demo failure requested")
    if text.startswith("/image"):
        new.append(_hidden_image_message())
    if text.startswith("/interrupt"):
        answer = interrupt({"question": "approve?"})
        prompt.append(SystemMessage(content=f"resumed: {answer}"))
    if text.startswith("/review"):
        draft = text.removeprefix("/review").strip() or "the reply"
        prompt.append(SystemMessage(content=review_outcome(interrupt(review_request(draft)), draft)))
    return update, new, prompt


REVIEWED_ACTION = "send_reply"


def review_request(draft: str) -> dict[str, Any]:
    """LangChain's human-in-the-loop request (``HITLRequest``) for sending ``draft``."""
    return {
        "action_requests": [
            {"name": REVIEWED_ACTION, "args": {"text": draft}, "description": "Review the reply before it is sent."}
        ],
        "review_configs": [{"action_name": REVIEWED_ACTION, "allowed_decisions": ["approve", "edit", "reject"]}],
    }


def review_outcome(response: Any, draft: str) -> str:
    """The reply to a person's decision (``HITLResponse``: ``{"decisions": [...]}``) on sending ``draft``."""
    decisions = response.get("decisions") if isinstance(response, dict) else None
    decision = decisions[0] if isinstance(decisions, list) and decisions and isinstance(decisions[0], dict) else {}
    match decision.get("type"):
        case "approve":
            return f"approved: {draft}"
        case "edit":
            edited = (decision.get("edited_action") or {}).get("args") or {}
            return f"edited: {edited.get('text', draft)}"
        case "reject":
            return f"rejected: {decision.get('message') or 'no reason given'}"
    return f"no decision: {response}"


# The client-side namespace of the memories; the store services put it under
# the user's root, where the /store routes find it as ["memories"].
MEMORY_NAMESPACE = ("memories",)
_REMEMBER = re.compile(r"^/remember\s+(.+)$", re.DOTALL)
_RECALL_PAGE = 100


def _memory_command(text: str) -> tuple[str, str] | None:
    """Return ("remember", TEXT) or ("recall", "") for a memory command, else None."""
    if remember := _REMEMBER.match(text):
        return "remember", remember.group(1).strip()
    if text == "/recall" or text.startswith("/recall "):
        return "recall", ""
    return None


def _memory_scope() -> tuple[Any, str] | str:
    """Return (store, user id) of the running graph, or the reply explaining why not."""
    store = get_store()
    user_id = store_user_id_from_config(get_config())
    if store is None:
        return "memory unavailable: this graph runs without a store"
    if user_id is None:
        return "memory unavailable: no user (langgraph_auth_user_id) in the run config"
    return store, user_id


def _memory_key() -> str:
    # Time-ordered, so recall lists memories in the order they were made.
    return str(uuid6())


def _recall_reply(items: list) -> str:
    texts = [item.value.get("text", "") for item in sorted(items, key=lambda item: item.key)]
    return f"remembered: {'; '.join(texts)}" if texts else "remembered: nothing"


def _remember(store, user_id: str, text: str) -> str:
    store_item_put(user_id=user_id, namespace=MEMORY_NAMESPACE, key=_memory_key(), value={"text": text}, store=store)
    return f"noted: {text}"


async def _aremember(store, user_id: str, text: str) -> str:
    value = {"text": text}
    await astore_item_put(user_id=user_id, namespace=MEMORY_NAMESPACE, key=_memory_key(), value=value, store=store)
    return f"noted: {text}"


def _recall(store, user_id: str) -> str:
    items: list[SearchItem] = []
    while page := store_item_search(
        user_id=user_id, namespace_prefix=MEMORY_NAMESPACE, limit=_RECALL_PAGE, offset=len(items), store=store
    ):
        items += page
    return _recall_reply(items)


async def _arecall(store, user_id: str) -> str:
    items: list[SearchItem] = []
    while page := await astore_item_search(
        user_id=user_id, namespace_prefix=MEMORY_NAMESPACE, limit=_RECALL_PAGE, offset=len(items), store=store
    ):
        items += page
    return _recall_reply(items)


def _memory_reply(command: tuple[str, str]) -> str:
    """Carry out a memory command with a sync Store; return the reply text."""
    scope = _memory_scope()
    if isinstance(scope, str):
        return scope
    action, text = command
    return _remember(*scope, text) if action == "remember" else _recall(*scope)


async def _amemory_reply(command: tuple[str, str]) -> str:
    """See _memory_reply(); the twin for async Stores."""
    scope = _memory_scope()
    if isinstance(scope, str):
        return scope
    action, text = command
    return await _aremember(*scope, text) if action == "remember" else await _arecall(*scope)


def agent(state: AgentState) -> dict[str, Any]:
    """Answer the last human message (sync twin, for sync savers)."""
    update, new, prompt = _turn(state)
    if command := _memory_command(_last_human_text(state)):
        prompt.append(SystemMessage(content=_memory_reply(command)))
    return {**update, "messages": [*new, model.invoke(prompt)]}


async def aagent(state: AgentState) -> dict[str, Any]:
    """Answer the last human message, streaming the reply."""
    update, new, prompt = _turn(state)
    if command := _memory_command(_last_human_text(state)):
        prompt.append(SystemMessage(content=await _amemory_reply(command)))
    return {**update, "messages": [*new, await model.ainvoke(prompt)]}


builder = StateGraph(AgentState)
builder.add_node("agent", RunnableLambda(agent, afunc=aagent, name="agent"))
builder.add_edge(START, "agent")
builder.add_edge("agent", END)

# Registered in settings as "runs.demo_agent:graph"; the server compiles the
# builder with its own checkpointer, Store and channel mode.
graph = builder
