"""Execute one claimed run: stream the graph, publish events, journal, finalize.

The executor owns a run from claim to terminal status. It reads and writes
thread state only through the checkpoint accessor (mode gate included), and it
publishes the terminal marker with the run's outcome last, after the row is
final, so a waiter that sees the marker also sees the final row.

Two phases, so that every run reaches exactly one final status whatever
arrives when: the graph phase runs in a task of its own, the only thing a
cancel ever cancels; the completion phase (final read, journal, finalize,
end marker) runs in the run's task and cannot be cut short. A cancel that
lands after the graph finished is still honoured when it is a rollback
(``run_finalize`` refuses to record an outcome over a rollback request).
Storage failures while completing are retried while the database is away
and, when the outcome itself cannot be stored, end the run ``error`` saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from langchain_core.messages import convert_to_messages
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Send

from checkpoints.accessor import StateAccessor, astate_accessor
from checkpoints.errors import CheckpointModeMismatchError
from checkpoints.graphs import EXECUTE
from checkpoints.modes import inject_mode, process_mode
from checkpoints.resume import alinearize
from checkpoints.rollback import RollbackError, RollbackPoint, acapture, arestore
from checkpoints.serialization import serialize, serialize_channel_values
from core.bridge import StreamBridge
from core.db import db_async
from core.text import storable
from runs.execution.journal import RunJournal
from runs.execution.thread_log import ThreadLogWriter, publish_quietly
from runs.models import CancelAction, Run, RunStatus
from runs.services.admission import ROLLED_BACK
from runs.services.events import run_events_append
from runs.services.lifecycle import (
    SHUTDOWN_MESSAGE,
    Finalization,
    Outcome,
    run_finalize,
    run_finalize_unrecordable,
    run_record_rollback_point,
)
from runs.services.run_request import LANGGRAPH_MODES
from runs.streaming.protocol import PROTOCOL_STREAM_MODES, ProtocolTranslator, terminal_status
from threads.stream_log import PendingEvent

logger = logging.getLogger(__name__)

SHUTDOWN = "shutdown"
# How long completion keeps retrying while the database or the bridge is
# unreachable (measured outage in the hostile test: ~50 s across a run's end).
# Past this the row stays ``running`` and the worker's reconcile pass, which
# fails runs no live task owns, ends it once the database answers again.
COMPLETION_RETRY_SECONDS = 120.0
_RETRY_FIRST_DELAY = 0.2
_RETRY_MAX_DELAY = 5.0
# Pauses before checking that a rollback restore is still the head (see _restore).
RESTORE_SETTLE_SECONDS = (0.05, 0.2, 1.0)
# What says a dependency is unreachable (worth retrying), not that the data is bad.
_TRANSIENT = (
    OperationalError,
    InterfaceError,
    OSError,  # ConnectionError, TimeoutError
    psycopg.OperationalError,
    psycopg.InterfaceError,
    redis.ConnectionError,
    redis.TimeoutError,
)

# Per-thread locks of this process: the rollback capture, a resume rewrite and
# a restore never interleave on one thread. (Across processes the one-active-
# run index already keeps two runs of a thread apart.)
# Weak values: a lock lives only while some task holds or waits on it.
_thread_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


class StreamBridgeError(RuntimeError):
    """The stream bridge refused an event: the run cannot be followed, so it fails."""


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
    run: Run,
    mode: str,
    journal: RunJournal | None,
    *,
    checkpoint_id: str | None,
    graph_defaults: Mapping[str, Any] | None = None,
) -> RunnableConfig:
    """Return the RunnableConfig: client config, server-owned keys, mode marker, journal.

    ``recursion_limit``: the client's (capped at admission), else the
    graph's own ``with_config`` default, else ``runs.recursion_limit``.
    """
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
    # Run.assistant_id is the graph; the assistant clients named is in kwargs.
    assistant_id = kwargs.get("assistant_id") or run.assistant_id
    metadata = {**run.metadata, "run_id": run.run_id, "graph_id": run.assistant_id, "assistant_id": assistant_id}
    recursion_limit = (
        kwargs.get("recursion_limit")
        or (graph_defaults or {}).get("recursion_limit")
        or settings.DEERFLOW_CONFIG.runs.recursion_limit
    )
    config = {
        **{k: v for k, v in client.items() if k in ("tags", "run_name")},
        "configurable": configurable,
        "metadata": metadata,
        "recursion_limit": recursion_limit,
    }
    if journal is not None:
        config["callbacks"] = [journal]
    return inject_mode(config, mode)


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


@dataclass
class StreamedEnd:
    """What the root graph last streamed: its last checkpoint, and its last ``values`` chunk with that serialized.

    A run that ended with nothing left to do has its final state in its last
    ``checkpoints`` chunk (the values a state read of the head gives, before
    they were stored): ``/wait`` answers them without reading the head back,
    decoding every message of the thread and encoding it again (10 % of a
    server's CPU under 8 ``/wait`` clients, more on long threads). The
    LangGraph Platform answers ``/wait`` with the run's last ``values`` too.
    """

    checkpoint: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    serialized: dict[str, Any] | None = None

    def note(self, mode: str, data: Any, serialized: Any) -> None:
        if mode == "checkpoints" and isinstance(data, dict):
            self.checkpoint = data
        elif mode == "values" and isinstance(data, dict):
            self.values, self.serialized = data, serialized

    def settled_values(self) -> dict[str, Any] | None:
        """Return the serialized final values if the last checkpoint left nothing to run; else None (read the head)."""
        checkpoint = self.checkpoint
        if checkpoint is None or checkpoint.get("next"):
            return None
        if any(task.get("interrupts") or task.get("error") for task in checkpoint.get("tasks") or ()):
            return None
        values = checkpoint.get("values")
        if not isinstance(values, dict):
            return None
        last = self.values
        if last is not None and values.keys() == last.keys() and all(values[k] is last[k] for k in values):
            assert self.serialized is not None, "every root values chunk is noted with its serialization"
            return dict(self.serialized)  # the same objects the last values chunk carried: serialized once
        return serialize_channel_values(values)


class RunExecution:
    """One run on this process's loop; the worker cancels its graph phase with an action."""

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
        self.graph_task: asyncio.Task | None = None
        self.accessor: StateAccessor | None = None
        # The thread's protocol-v2 log: every run feeds it, whatever its stream_mode.
        self.translator = ProtocolTranslator(run_id=run.run_id, graph_name=run.assistant_id)
        interval = settings.DEERFLOW_CONFIG.thread_stream.flush_interval_ms / 1000
        self.thread_log = ThreadLogWriter(thread_id=run.thread_id, run_id=run.run_id, bridge=bridge, interval=interval)
        self.interrupts: list[dict[str, Any]] = []
        self.streamed_end = StreamedEnd()

    async def _flush_events(self, batch: list[dict[str, Any]]) -> None:
        await db_async(run_events_append)(thread_id=self.run.thread_id, run_id=self.run.run_id, events=storable(batch))

    async def publish(self, event: str, data: Any) -> None:
        """Publish one event; a bridge that fails (past its retry) fails the run, saying why."""
        try:
            await self.bridge.publish(self.run.run_id, event, data)
        except Exception as exc:
            raise StreamBridgeError(
                f"The run's event stream could not be published: {type(exc).__name__}: {exc}"
            ) from exc

    def cancel(self, action: str) -> None:
        """Cancel the graph phase with ``action`` (the first action wins; later calls do nothing).

        Once the graph phase is over only the action is noted: completion
        cannot be interrupted, and a rollback is then carried out by it.
        """
        if self.cancel_action is not None:
            return
        self.cancel_action = action
        if self.graph_task is not None and not self.graph_task.done():
            self.graph_task.cancel()

    async def execute(self) -> Outcome:
        """Run the graph phase, then complete; never raises, records exactly one outcome."""
        self.graph_task = graph_task = asyncio.ensure_future(self._graph_phase())
        try:
            outcome = await asyncio.shield(graph_task)
        except asyncio.CancelledError:
            run_task = asyncio.current_task()
            assert run_task is not None, "a coroutine awaited here runs in a task"
            if run_task.cancelling():
                # Only the loop closing cancels the run's own task; the graph
                # phase gets the same, then completion still runs.
                run_task.uncancel()
                self.cancel(SHUTDOWN)
            outcome = await self._settled()
        return await self._complete(outcome)

    async def _settled(self) -> Outcome:
        """Wait for a graph phase that was just cancelled; its own handler turns that into an outcome.

        A graph phase cancelled before its first step never reached its
        handler (a cancel in the loop turn the run started): its outcome is
        the cancel's, decided here.
        """
        graph_task = self.graph_task
        assert graph_task is not None, "called from execute(), after the graph phase started"
        while True:
            try:
                return await asyncio.shield(graph_task)
            except asyncio.CancelledError:
                if graph_task.done():
                    return await self._cancelled()

    async def _graph_phase(self) -> Outcome:
        run = self.run
        if self.cancel_action is not None:  # cancelled before this task started
            return await self._cancelled()
        try:
            # A factory graph is built for this run from its config and context.
            self.accessor = accessor = await astate_accessor(
                run.assistant_id,
                fresh_saver=True,
                access=EXECUTE,
                config=build_config(run, process_mode()[0], None, checkpoint_id=self.checkpoint_id),
                context=run.kwargs.get("context"),
            )
            self.thread_log.add(self.translator.running())
            await self.journal.record("run.start", None, {"assistant_id": run.assistant_id})
            graph_input = build_input(run.kwargs)
            if isinstance(graph_input, dict) and graph_input.get("messages"):
                await self.journal.record_human_input(graph_input["messages"])
            head = await accessor.ahead_record(run.thread_id)  # the pre-write mode gate
            async with thread_lock(run.thread_id):
                await self._capture_rollback_point(accessor, head)
                if self.checkpoint_id and await alinearize(accessor, run.thread_id, self.checkpoint_id):
                    self.checkpoint_id = None  # the run continues from the rewritten head
            await self._stream(accessor, graph_input)
            return Outcome(status=RunStatus.SUCCESS)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return await self._cancelled()
        except Exception as exc:  # the graph's failure is the run's outcome
            logger.info("run %s failed: %r", run.run_id, exc)
            name = type(exc).__name__
            await self._publish_quietly("error", {"message": str(exc), "name": name, "error": name})
            with contextlib.suppress(Exception):
                await self.journal.record_failure(exc, last_checkpoint=self.streamed_end.checkpoint)
            return Outcome(status=RunStatus.ERROR, error=str(exc) or name, error_name=name)

    async def _stream(self, accessor: StateAccessor, graph_input: Any) -> None:
        kwargs = self.run.kwargs
        subgraphs = bool(kwargs.get("stream_subgraphs"))
        modes = [LANGGRAPH_MODES.get(m, m) for m in kwargs.get("stream_mode") or ["values"]]
        client_modes = set(modes)
        options: dict[str, Any] = {}
        for key in ("interrupt_before", "interrupt_after", "durability"):
            if kwargs.get(key) is not None:
                options[key] = kwargs[key]
        if kwargs.get("context"):
            options["context"] = kwargs["context"]
        config = build_config(
            self.run,
            accessor.storage_mode,
            self.journal,
            checkpoint_id=self.checkpoint_id,
            graph_defaults=accessor.graph.config,
        )
        all_modes = [*modes, *(m for m in PROTOCOL_STREAM_MODES if m not in client_modes)]
        stream = accessor.graph.astream(graph_input, config, stream_mode=all_modes, subgraphs=True, **options)
        # aclosing: when a publish raises or a cancel lands in the loop body,
        # the graph's loop is closed (and its pending checkpoint writes
        # awaited) before a rollback restores anything. Left to the garbage
        # collector, a late write re-added the rolled-back answer (1 of 50).
        # astream is an async generator (it has aclose); its annotation says AsyncIterator.
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            async for chunk in stream:
                namespace, mode, data = chunk
                classic = mode in client_modes and not (namespace and not subgraphs)
                payload = event_data(mode, data) if classic else None
                serialized = payload if mode == "values" else None
                if not namespace:
                    if mode == "values" and serialized is None:
                        serialized = serialize_channel_values(data)  # the translator's, done once here
                    self.streamed_end.note(mode, data, serialized)
                self.thread_log.add(self.translator.feed(namespace, mode, data, serialized=serialized))
                if classic:
                    await self.publish(event_name(mode, namespace, subgraphs), payload)

    async def _capture_rollback_point(self, accessor: StateAccessor, head) -> None:
        """Capture the pre-run head and keep it on the run row; any failure disables rollback."""
        try:
            point = await acapture(accessor, self.run.thread_id, head)
            await db_async(run_record_rollback_point)(run_id=self.run.run_id, point=point.to_json(accessor.saver.serde))
        except CheckpointModeMismatchError:
            raise
        except Exception:
            logger.warning("run %s: rollback point capture failed; rollback disabled", self.run.run_id, exc_info=True)
            return
        self.rollback_point, self.rollback_captured = point, True

    async def _cancelled(self) -> Outcome:
        action = self.cancel_action or SHUTDOWN
        if action == CancelAction.ROLLBACK:
            return await self._rolled_back()
        if action == SHUTDOWN:
            return Outcome(status=RunStatus.ERROR, error=SHUTDOWN_MESSAGE)
        return Outcome(status=RunStatus.INTERRUPTED, error="Cancelled by user")

    async def _rolled_back(self) -> Outcome:
        """Put the thread back to its pre-run state (checkpoints.rollback has the contract).

        Never raises: a restore that fails is the run's outcome, said plainly.
        """
        if self.accessor is None or not self.rollback_captured or self.rollback_point is None:
            logger.warning("run %s: rollback requested but no rollback point was captured", self.run.run_id)
            return Outcome(status=RunStatus.ERROR, error=ROLLED_BACK, rollback_settled=True)
        try:
            await self._retrying("rollback restore", self._restore)
        except Exception as exc:
            logger.exception("run %s: rollback restore failed", self.run.run_id)
            return Outcome(
                status=RunStatus.ERROR,
                error=f"Rollback failed; the thread keeps this run's writes: {type(exc).__name__}: {exc}",
                error_name="RollbackFailed",
                rollback_settled=True,
            )
        return Outcome(status=RunStatus.ERROR, error=ROLLED_BACK, rollback_settled=True)

    async def _restore(self) -> None:
        """Restore, then check nothing landed on top; restore again if the cancelled graph wrote late.

        Measured on the live suite: after the graph phase had been cancelled
        and had returned, its step checkpoints still arrived after the restore
        had emptied the thread (6 of ~40 rollbacks in the finish-line race;
        the answer came back, and on PostgreSQL a checkpoint was left whose
        parent was gone). The check reads the head after a short settle and
        repeats the restore until the head is the restored one; the first
        settle (50 ms) is what every rollback pays.
        """
        thread_id, accessor, point = self.run.thread_id, self.accessor, self.rollback_point
        assert accessor is not None and point is not None, "the caller restores only a captured rollback point"
        async with thread_lock(thread_id):
            for settle in RESTORE_SETTLE_SECONDS:
                restored = await arestore(accessor, thread_id, point)
                await asyncio.sleep(settle)
                head = await accessor.ahead_tuple(thread_id)
                if (head.config["configurable"]["checkpoint_id"] if head else None) == restored:
                    return
                logger.warning(
                    "run %s: a checkpoint landed after the rollback restore; restoring again", self.run.run_id
                )
            raise RollbackError("the cancelled run kept writing checkpoints after its rollback restore")

    async def _publish_quietly(self, event: str, data: Any) -> None:
        try:
            await self.publish(event, data)
        except Exception:
            logger.warning("run %s: could not publish %s", self.run.run_id, event, exc_info=True)

    async def _final_values(self, outcome: Outcome) -> dict[str, Any]:
        if self.accessor is None or outcome.error == SHUTDOWN_MESSAGE:
            return {}
        if outcome.status == RunStatus.SUCCESS and (values := self.streamed_end.settled_values()) is not None:
            outcome.pending_interrupt, self.interrupts = False, []
            checkpoint = self.streamed_end.checkpoint
            assert checkpoint is not None, "settled_values() answers only from a checkpoint"
            title = checkpoint["values"].get("title")
            outcome.title = title if isinstance(title, str) else None
            return values
        try:
            snapshot = await self.accessor.aget(self.run.thread_id)
        except Exception:
            logger.warning("run %s: final state read failed", self.run.run_id, exc_info=True)
            return {}
        values = serialize_channel_values(snapshot.values or {})
        if snapshot.interrupts:
            values["__interrupt__"] = serialize(list(snapshot.interrupts))
        # Waiting on interrupt() or stopped before a node (interrupt_before/after):
        # the thread is interrupted either way, as on the Platform.
        outcome.pending_interrupt = (
            bool(snapshot.interrupts)
            or any(t.interrupts for t in snapshot.tasks)
            or (outcome.status == RunStatus.SUCCESS and bool(snapshot.next))
        )
        self.interrupts = [{"id": i.id, "value": serialize(i.value)} for i in snapshot.interrupts]
        title = (snapshot.values or {}).get("title")
        outcome.title = title if isinstance(title, str) else None
        return values

    async def _complete(self, outcome: Outcome) -> Outcome:
        events = self.journal.drain()
        final_values = await self._final_values(outcome)
        closing = self.translator.close_open(failed=outcome.status == RunStatus.ERROR)
        if outcome.status == RunStatus.SUCCESS and self.interrupts:
            # It ends on input.requested: the run's last events go out first (ThreadLogWriter.pause_gap).
            self.thread_log.add(closing)
            log_tail = await self.thread_log.drain(publish_first=True)
        else:
            log_tail = [*await self.thread_log.drain(), *closing]
        finalization = await self._finalize(outcome, events, log_tail, final_values)
        if finalization.rollback_requested:
            # A rollback landed while the graph was finishing: honour it.
            self.cancel_action = CancelAction.ROLLBACK
            outcome = await self._rolled_back()
            final_values = await self._final_values(outcome)
            finalization = await self._finalize(outcome, events, log_tail, final_values)
        self.promoted_run_id = finalization.promoted_run_id
        await self.thread_log.pause_gap()  # an input.requested among them follows what preceded it
        await publish_quietly(self.bridge, self.run.thread_id, list(finalization.stream_envelopes))
        end = {
            "status": outcome.status,
            "error": outcome.error or None,
            "error_name": outcome.error_name or None,
            "values": final_values,
        }
        try:
            await self._retrying("end marker", lambda: self.bridge.publish_end(self.run.run_id, end))
        except Exception:
            # Waiters still end: idle subscribers look the run up in the database.
            logger.exception("run %s: the end marker could not be published", self.run.run_id)
        if not finalization.finalized:
            logger.warning(
                "run %s: not finalized by %s (cancelled or reclaimed elsewhere)", self.run.run_id, self.worker_id
            )
        return outcome

    def _log_terminal(self, outcome: Outcome) -> list[PendingEvent]:
        status = terminal_status(run_status=outcome.status, pending_interrupt=outcome.pending_interrupt)
        interrupts = self.interrupts if status == "interrupted" and outcome.status == RunStatus.SUCCESS else []
        error = outcome.error if status == "failed" else None
        return self.translator.terminal(status=status, error=error, interrupts=interrupts)

    async def _finalize(
        self,
        outcome: Outcome,
        events: list[dict[str, Any]],
        log_tail: list[PendingEvent],
        final_values: dict[str, Any],
    ) -> Finalization:
        """Record the outcome with the journal's last events; fall back to an error that can be stored.

        ``final_values`` go to the run's webhook, sent once the outcome is committed.
        """
        stream_events = [*log_tail, *self._log_terminal(outcome)]
        outcome.usage = self.journal.usage_fields()
        end = RunJournal.entry("run.end", {"status": outcome.status, "error": outcome.error or None})
        batch = storable([*events, end])
        finalize = db_async(run_finalize)
        try:
            return await self._retrying(
                "finalize",
                lambda: finalize(
                    run_id=self.run.run_id,
                    worker_id=self.worker_id,
                    outcome=outcome,
                    events=batch,
                    thread_id=self.run.thread_id,
                    stream_events=stream_events,
                    stream_retry=self.thread_log.in_doubt,
                    final_values=final_values,
                ),
            )
        except (OperationalError, InterfaceError):
            raise  # still unreachable: the reconcile pass ends the run later
        except (DatabaseError, ValueError) as exc:
            logger.exception("run %s: its outcome could not be stored", self.run.run_id)
            reason = f"The run's outcome could not be stored: {type(exc).__name__}: {exc}"[:2000]
            outcome.status, outcome.error, outcome.error_name = RunStatus.ERROR, reason, "UnrecordableOutcome"
            unrecordable = db_async(run_finalize_unrecordable)
            return await self._retrying(
                "finalize",
                lambda: unrecordable(
                    run_id=self.run.run_id,
                    worker_id=self.worker_id,
                    reason=reason,
                    thread_id=self.run.thread_id,
                    stream_events=self._log_terminal(outcome),
                ),
            )

    async def _retrying(self, what: str, attempt):
        """Await ``attempt()``, retrying while a dependency is unreachable (a bounded time)."""
        deadline = time.monotonic() + COMPLETION_RETRY_SECONDS
        delay = _RETRY_FIRST_DELAY
        while True:
            try:
                return await attempt()
            except Exception as exc:
                if not isinstance(exc, _TRANSIENT) or time.monotonic() + delay > deadline:
                    raise
                logger.warning("run %s: %s failed (%r); retrying in %.1f s", self.run.run_id, what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_DELAY)
