"""The run journal: LangChain callbacks turned into persisted events and token usage."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import BaseMessage

from checkpoints.serialization import serialize
from runs.services.outcome import failure_details

logger = logging.getLogger(__name__)

FLUSH_EVERY = 20
# A buffered event is written within this long even when no more follow: the
# run page shows a slow or stuck run's timeline while it runs. A run that
# ends sooner writes its events once, with its outcome (no extra write).
FLUSH_WITHIN_SECONDS = 1.0
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
    """Buffer a run's events, each stamped with when it happened, and count its tokens.

    Flushes a batch at 20 events, or a second after the oldest buffered one;
    the executor drains the rest into the run's final write.
    """

    raise_error = False

    def __init__(self, *, flush: Callable[[list[dict[str, Any]]], Awaitable[Any]]) -> None:
        self._flush = flush
        # config.yaml run_events.track_token_usage: false leaves the token columns at zero, as DeerFlow does.
        self.track_token_usage: bool = settings.DEERFLOW_CONFIG.run_events.track_token_usage
        self._buffer: list[dict[str, Any]] = []
        # One flush at a time, in order: batches get their seq in the order they were recorded.
        self._flushing = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._late_flush: asyncio.Task | None = None
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
        """Return one event as ``run_events_append`` takes it, stamped now."""
        return {
            "event_type": event_type,
            "content": serialize(content),
            "metadata": metadata or {},
            "created_at": timezone.now(),
        }

    async def record(self, event_type: str, content: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._buffer.append(self.entry(event_type, content, metadata))
        if len(self._buffer) >= FLUSH_EVERY:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_WITHIN_SECONDS, self._flush_late)

    async def record_failure(self, error: BaseException, *, last_checkpoint: Mapping[str, Any] | None) -> None:
        """Record the run's failure with its details (``runs.services.outcome.failure_details``)."""
        await self.record("run.error", failure_details(error, last_checkpoint=last_checkpoint))

    def drain(self) -> list[dict[str, Any]]:
        """Take the events not yet flushed (the executor writes them with the run's outcome)."""
        self._cancel_timer()
        batch, self._buffer = self._buffer, []
        return batch

    async def flush(self) -> None:
        self._cancel_timer()
        async with self._flushing:
            batch, self._buffer = self._buffer, []
            if not batch:
                return
            try:
                await self._flush(batch)
            except Exception:
                self._buffer = batch + self._buffer  # retried on the next flush
                raise

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _flush_late(self) -> None:
        self._timer = None
        self._late_flush = asyncio.ensure_future(self._flush_quietly())

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except Exception:
            logger.warning("run journal: a timed flush failed; its events go with the next one", exc_info=True)

    async def _settle(self, parent_run_id: UUID | None) -> None:
        """When the graph itself ends, wait for a timed flush under way: the run's last write comes after it."""
        if parent_run_id is None and self._late_flush is not None:
            await asyncio.shield(self._late_flush)

    async def on_chain_end(self, outputs, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        await self._settle(parent_run_id)

    async def on_chain_error(self, error, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        await self._settle(parent_run_id)

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
        self.llm_calls += 1
        self.model_name = model
        if self.track_token_usage:
            self._count(model, caller, usage)
        latency = time.monotonic() - self._started.pop(run_id, time.monotonic())
        self.last_ai = message_text(message)[:TEXT_LIMIT]
        self.message_count += 1
        metadata: dict[str, Any] = {
            "caller": caller,
            "latency_ms": round(latency * 1000, 1),
            "llm_call_index": self.llm_calls,
        }
        if self.track_token_usage:
            metadata["usage"] = usage
        await self.record("llm.ai.response", message, metadata)

    def _count(self, model: str, caller: str, usage: dict[str, int]) -> None:
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
