"""Execute one claimed run: stream the graph, publish events, journal, finalize.

The executor owns a run from claim to terminal status. It reads and writes
thread state only through the checkpoint accessor (mode gate included), and it
publishes the terminal marker with the run's outcome last, after the row is
final, so a waiter that sees the marker also sees the final row.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from channels.db import database_sync_to_async
from langchain_core.messages import convert_to_messages
from langgraph.types import Command, Send

from checkpoints.accessor import StateAccessor, astate_accessor
from checkpoints.errors import CheckpointModeMismatchError
from checkpoints.modes import inject_mode
from checkpoints.resume import alinearize
from checkpoints.rollback import RollbackPoint, acapture, arestore
from checkpoints.serialization import serialize, serialize_channel_values
from runs.execution.journal import RunJournal
from runs.models import CancelAction, Run, RunStatus
from runs.schemas import LANGGRAPH_MODES
from runs.services.admission import ROLLED_BACK
from runs.services.events import run_events_append
from runs.services.lifecycle import SHUTDOWN_MESSAGE, Outcome, run_finalize
from runs.streaming.bridge import StreamBridge

logger = logging.getLogger(__name__)

SHUTDOWN = "shutdown"

# Per-thread locks of this process: the rollback capture, a resume rewrite and
# a restore never interleave on one thread. (Across processes the one-active-
# run index already keeps two runs of a thread apart.)
# Weak values: a lock lives only while some task holds or waits on it.
_thread_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def thread_lock(thread_id: str) -> asyncio.Lock:
    lock = _thread_locks.get(thread_id)
    if lock is None:
        lock = _thread_locks[thread_id] = asyncio.Lock()
    return lock


def build_input(kwargs: dict[str, Any]) -> Any:
    """Return the graph input: a Command for ``command``, else ``input`` (None resumes)."""
    command = kwargs.get("command")
    if command:
        goto = command.get("goto")
        if goto is not None:
            items = goto if isinstance(goto, list) else [goto]
            goto = [Send(g["node"], g.get("input")) if isinstance(g, dict) else g for g in items]
        return Command(resume=command.get("resume"), update=command.get("update"), goto=goto or ())
    payload = kwargs.get("input")
    if isinstance(payload, dict) and payload.get("messages") is not None:
        messages = payload["messages"]
        payload = {**payload, "messages": convert_to_messages(messages if isinstance(messages, list) else [messages])}
    return payload


def build_config(
    run: Run, accessor: StateAccessor, journal: RunJournal, *, checkpoint_id: str | None
) -> dict[str, Any]:
    """Return the RunnableConfig: client config, server-owned keys, mode marker, journal."""
    kwargs = run.kwargs
    client = kwargs.get("config") or {}
    configurable = {
        **(client.get("configurable") or {}),
        "thread_id": run.thread_id,
        "checkpoint_ns": "",
        # Graphs find the caller here (the LangGraph Platform's key); the Store
        # routes and graphs share the per-user namespace root built from it.
        "langgraph_auth_user_id": str(run.owner_id),
    }
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    metadata = {**run.metadata, "run_id": run.run_id, "graph_id": run.assistant_id, "assistant_id": run.assistant_id}
    config = {
        **{k: v for k, v in client.items() if k in ("tags", "run_name")},
        "configurable": configurable,
        "metadata": metadata,
        "recursion_limit": kwargs.get("recursion_limit", 100),
        "callbacks": [journal],
    }
    return inject_mode(config, accessor.mode)


def event_name(mode: str, namespace: tuple[str, ...], subgraphs: bool) -> str:
    name = "messages" if mode == "messages" else mode
    return f"{name}|{'|'.join(namespace)}" if subgraphs and namespace else name


def event_data(mode: str, data: Any) -> Any:
    if mode == "values":
        return serialize_channel_values(data)
    if mode == "messages":
        chunk, metadata = data
        return [serialize(chunk), serialize(metadata)]
    return serialize(data)


class RunExecution:
    """One run on this process's loop; the worker cancels it with an action."""

    def __init__(self, run: Run, *, bridge: StreamBridge, worker_id: str) -> None:
        self.run = run
        self.bridge = bridge
        self.worker_id = worker_id
        self.cancel_action: str | None = None
        self.journal = RunJournal(flush=self._flush_events)
        self.rollback_point: RollbackPoint | None = None
        # Rollback is disabled unless capture succeeded (never restore partial state).
        self.rollback_captured = False
        self.checkpoint_id: str | None = run.kwargs.get("checkpoint_id")
        self.promoted_run_id: str | None = None

    async def _flush_events(self, batch: list[dict[str, Any]]) -> None:
        await database_sync_to_async(run_events_append)(
            thread_id=self.run.thread_id, run_id=self.run.run_id, events=batch
        )

    async def publish(self, event: str, data: Any) -> None:
        await self.bridge.publish(self.run.run_id, event, data)

    async def execute(self) -> Outcome:
        """Run the graph to a terminal outcome; never raises (cancellation included)."""
        run = self.run
        kwargs = run.kwargs
        accessor: StateAccessor | None = None
        outcome: Outcome
        try:
            accessor = await astate_accessor(run.assistant_id, fresh_saver=True)
            await self.journal.record("run.start", None, {"assistant_id": run.assistant_id})
            graph_input = build_input(kwargs)
            if isinstance(graph_input, dict) and graph_input.get("messages"):
                await self.journal.record_human_input(graph_input["messages"])
            head = await accessor.ahead_tuple(run.thread_id)  # the pre-write mode gate
            async with thread_lock(run.thread_id):
                await self._capture_rollback_point(accessor, head)
                if self.checkpoint_id and await alinearize(accessor, run.thread_id, self.checkpoint_id):
                    self.checkpoint_id = None  # the run continues from the rewritten head
            await self._stream(accessor, graph_input)
            outcome = Outcome(status=RunStatus.SUCCESS)
        except asyncio.CancelledError:
            outcome = await self._cancelled(accessor)
        except Exception as exc:  # the graph's failure is the run's outcome
            logger.info("run %s failed: %r", run.run_id, exc)
            await self.publish("error", {"message": str(exc), "name": type(exc).__name__, "error": type(exc).__name__})
            await self.journal.record("run.error", {"message": str(exc), "name": type(exc).__name__})
            outcome = Outcome(
                status=RunStatus.ERROR, error=str(exc) or type(exc).__name__, error_name=type(exc).__name__
            )
        return await self._complete(accessor, outcome)

    async def _stream(self, accessor: StateAccessor, graph_input: Any) -> None:
        kwargs = self.run.kwargs
        subgraphs = bool(kwargs.get("stream_subgraphs"))
        modes = [LANGGRAPH_MODES.get(m, m) for m in kwargs.get("stream_mode") or ["values"]]
        options: dict[str, Any] = {}
        for key in ("interrupt_before", "interrupt_after", "durability"):
            if kwargs.get(key) is not None:
                options[key] = kwargs[key]
        if kwargs.get("context"):
            options["context"] = kwargs["context"]
        config = build_config(self.run, accessor, self.journal, checkpoint_id=self.checkpoint_id)
        async for chunk in accessor.graph.astream(graph_input, config, stream_mode=modes, subgraphs=True, **options):
            namespace, mode, data = chunk
            if namespace and not subgraphs:
                continue
            await self.publish(event_name(mode, namespace, subgraphs), event_data(mode, data))

    async def _capture_rollback_point(self, accessor: StateAccessor, head) -> None:
        """Capture the pre-run head; any failure disables rollback (never a partial restore)."""
        try:
            self.rollback_point = await acapture(accessor, self.run.thread_id, head)
            self.rollback_captured = True
        except CheckpointModeMismatchError:
            raise
        except Exception:
            logger.warning("run %s: rollback point capture failed; rollback disabled", self.run.run_id, exc_info=True)

    async def _cancelled(self, accessor: StateAccessor | None) -> Outcome:
        action = self.cancel_action or SHUTDOWN
        if action == CancelAction.ROLLBACK:
            await self._restore(accessor)
            return Outcome(status=RunStatus.ERROR, error=ROLLED_BACK)
        if action == SHUTDOWN:
            return Outcome(status=RunStatus.ERROR, error=SHUTDOWN_MESSAGE)
        return Outcome(status=RunStatus.INTERRUPTED, error="Cancelled by user")

    async def _restore(self, accessor: StateAccessor | None) -> None:
        """Put the thread back to its pre-run state (checkpoints.rollback has the contract)."""
        if accessor is None or not self.rollback_captured or self.rollback_point is None:
            logger.warning("run %s: rollback requested but no rollback point was captured", self.run.run_id)
            return
        async with thread_lock(self.run.thread_id):
            await arestore(accessor, self.run.thread_id, self.rollback_point)

    async def _complete(self, accessor: StateAccessor | None, outcome: Outcome) -> Outcome:
        final_values: dict[str, Any] = {}
        if accessor is not None and outcome.error != SHUTDOWN_MESSAGE:
            try:
                snapshot = await accessor.aget(self.run.thread_id)
                final_values = serialize_channel_values(snapshot.values or {})
                if snapshot.interrupts:
                    final_values["__interrupt__"] = serialize(list(snapshot.interrupts))
                outcome.pending_interrupt = bool(snapshot.interrupts) or any(t.interrupts for t in snapshot.tasks)
                title = (snapshot.values or {}).get("title")
                outcome.title = title if isinstance(title, str) else None
            except Exception:
                logger.warning("run %s: final state read failed", self.run.run_id, exc_info=True)
        await self.journal.record("run.end", {"status": outcome.status, "error": outcome.error or None})
        try:
            await self.journal.flush()
        except Exception:
            logger.exception("run %s: journal flush failed", self.run.run_id)
        outcome.usage = self.journal.usage_fields()
        finalized, promoted = await database_sync_to_async(run_finalize)(
            run_id=self.run.run_id, worker_id=self.worker_id, outcome=outcome
        )
        self.promoted_run_id = promoted
        end = {
            "status": outcome.status,
            "error": outcome.error or None,
            "error_name": outcome.error_name or None,
            "values": final_values,
        }
        await self.bridge.publish_end(self.run.run_id, end)
        if not finalized:
            logger.warning(
                "run %s: not finalized by %s (cancelled or reclaimed elsewhere)", self.run.run_id, self.worker_id
            )
        return outcome
