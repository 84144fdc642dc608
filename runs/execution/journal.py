"""The run journal: LangChain callbacks turned into persisted events and token usage."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import BaseMessage

from checkpoints.serialization import serialize

FLUSH_EVERY = 20
TEXT_LIMIT = 2000


def caller_of(tags: list[str] | None) -> str:
    """Attribute an LLM call: ``subagent:*`` and ``middleware:*`` tags, else the lead agent."""
    for tag in tags or ():
        if tag.startswith("subagent:"):
            return "subagent"
        if tag.startswith("middleware:"):
            return "middleware"
    return "lead_agent"


def message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict)).strip()


class RunJournal(AsyncCallbackHandler):
    """Buffer a run's events and count its tokens; flush in batches of 20."""

    raise_error = False

    def __init__(self, *, flush: Callable[[list[dict[str, Any]]], Awaitable[Any]]) -> None:
        self._flush = flush
        self._buffer: list[dict[str, Any]] = []
        self._started: dict[UUID, float] = {}
        self._counted: set[UUID] = set()
        self.input_tokens = 0
        self.output_tokens = 0
        self.total_tokens = 0
        self.llm_calls = 0
        self.by_model: dict[str, dict[str, int]] = defaultdict(
            lambda: {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        )
        self.by_caller: dict[str, int] = defaultdict(int)
        self.model_name = ""
        self.first_human = ""
        self.last_ai = ""
        self.message_count = 0

    @staticmethod
    def entry(event_type: str, content: Any = None, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Return one event as ``run_events_append`` takes it."""
        return {"event_type": event_type, "content": serialize(content), "metadata": metadata or {}}

    async def record(self, event_type: str, content: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._buffer.append(self.entry(event_type, content, metadata))
        if len(self._buffer) >= FLUSH_EVERY:
            await self.flush()

    def drain(self) -> list[dict[str, Any]]:
        """Take the events not yet flushed (the executor writes them with the run's outcome)."""
        batch, self._buffer = self._buffer, []
        return batch

    async def flush(self) -> None:
        batch, self._buffer = self._buffer, []
        try:
            await self._flush(batch)
        except Exception:
            self._buffer = batch + self._buffer  # retried on the next flush
            raise

    async def record_human_input(self, messages: list[BaseMessage]) -> None:
        for message in messages:
            if message.type == "human" and not message.additional_kwargs.get("hide_from_ui"):
                self.first_human = self.first_human or message_text(message)[:TEXT_LIMIT]
                self.message_count += 1
                await self.record("llm.human.input", message)

    async def on_chat_model_start(self, serialized, messages, *, run_id: UUID, **kwargs: Any) -> None:
        self._started[run_id] = time.monotonic()

    async def on_llm_end(self, response, *, run_id: UUID, tags: list[str] | None = None, **kwargs: Any) -> None:
        if run_id in self._counted:
            return
        self._counted.add(run_id)
        message = response.generations[0][0].message if response.generations and response.generations[0] else None
        if message is None:
            return
        caller = caller_of(tags)
        usage = dict(getattr(message, "usage_metadata", None) or {})
        usage.setdefault("total_tokens", usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
        model = (
            (message.response_metadata or {}).get("model_name")
            or (message.response_metadata or {}).get("model")
            or "unknown"
        )
        self._count(model, caller, usage)
        latency = time.monotonic() - self._started.pop(run_id, time.monotonic())
        self.last_ai = message_text(message)[:TEXT_LIMIT]
        self.message_count += 1
        await self.record(
            "llm.ai.response",
            message,
            {
                "caller": caller,
                "usage": usage,
                "latency_ms": round(latency * 1000, 1),
                "llm_call_index": self.llm_calls,
            },
        )

    def _count(self, model: str, caller: str, usage: dict[str, int]) -> None:
        self.llm_calls += 1
        self.model_name = model
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            self.by_model[model][key] += int(usage.get(key, 0))
        self.input_tokens += int(usage.get("input_tokens", 0))
        self.output_tokens += int(usage.get("output_tokens", 0))
        self.total_tokens += int(usage.get("total_tokens", 0))
        self.by_caller[caller] += int(usage.get("total_tokens", 0))

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        await self.record("llm.error", {"message": str(error), "name": type(error).__name__})

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.message_count += 1
        await self.record("llm.tool.result", output)

    def usage_fields(self) -> dict[str, Any]:
        """Return the Run columns the journal owns."""
        return {
            "model_name": self.model_name,
            "total_input_tokens": self.input_tokens,
            "total_output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "llm_call_count": self.llm_calls,
            "token_usage_by_model": dict(self.by_model),
            "token_usage_by_caller": dict(self.by_caller),
            "message_count": self.message_count,
            "first_human_message": self.first_human,
            "last_ai_message": self.last_ai,
        }
