"""A2A tasks as runs: a task is a run, its ``contextId`` the run's thread.

Every lookup goes through the caller's scope (``core.access``, custom
auth's handler for the method's action), so another user's task or context
is answered exactly as a missing one (``-32001``). Starting and cancelling
are the run services every interface uses (``arun_start``, ``arun_cancel``);
a task's stream is the thread's durable protocol log, followed from any seq
(``threads.stream_follow``), so it replays after the run ended, after a
restart and through any process.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.db.models import Max, Min

from checkpoints.accessor import astate_accessor
from core.access import AccessScope, aauthorize
from core.bridge_runtime import get_bridge
from core.errors import DomainError, Invalid, NotFound
from runs.a2a import wire
from runs.a2a.wire import A2AError
from runs.assistant_selectors import assistant_get
from runs.models import Assistant, Run
from runs.services.cancel import arun_cancel
from runs.services.outcome import arun_final_values
from runs.services.run_request import RunRequest
from runs.services.start import arun_start
from threads.models import UNFINISHED_STATUSES, ThreadMeta, ThreadStatus, ThreadStreamEvent
from threads.selectors import owned_thread_or_none
from threads.stream_follow import Incarnation, follow_thread

# How long CancelTask waits for the run to stop before answering its task as it stands.
CANCEL_WAIT_SECONDS = 5.0
# A task stream's idle tick: it checks the run's row then (an end the log did not carry).
IDLE_SECONDS = 1.0


@dataclass(frozen=True)
class Agent:
    """The assistant an ``/a2a/{id}`` endpoint serves."""

    assistant_id: str
    graph_id: str
    name: str
    description: str

    @classmethod
    def of(cls, assistant: Assistant) -> Agent:
        name = assistant.name or assistant.graph_id
        return cls(assistant.assistant_id, assistant.graph_id, name, assistant.description or "")


def _agent_get(*, owner, assistant_id: str) -> Agent:
    return Agent.of(assistant_get(owner=owner, assistant_id=assistant_id))


aagent_get = database_sync_to_async(_agent_get)


# -- finding tasks -----------------------------------------------------------------------------


def _task_run(*, scope: AccessScope, owner, agent: Agent, thread_id: str | None, run_id: str) -> tuple[Run, ThreadMeta]:
    run = Run.objects.filter(pk=run_id, kwargs__assistant_id=agent.assistant_id).first()
    thread = None if run is None else owned_thread_or_none(thread_id=run.thread_id, owner=owner, scope=scope)
    if run is None or thread is None or (thread_id is not None and thread_id != run.thread_id):
        raise A2AError(wire.TASK_NOT_FOUND, "Task not found")
    return run, thread


async def atask_get(owner, agent: Agent, task: Any, *, action: str = "read") -> tuple[Run, ThreadMeta]:
    """Return the caller's task (run, thread) on this agent; another user's is ``-32001`` like a missing one."""
    thread_id, run_id = wire.split_task_id(task)
    scope = await aauthorize(owner, resource="threads", action=action, value={"thread_id": thread_id})
    return await database_sync_to_async(_task_run)(
        scope=scope, owner=owner, agent=agent, thread_id=thread_id, run_id=run_id
    )


def _awaiting_input(run: Run, thread: ThreadMeta) -> bool:
    """Whether the run ended on an ``interrupt()`` still pending: the thread's latest run, interrupted."""
    if run.status != "success" or thread.status != ThreadStatus.INTERRUPTED:
        return False
    latest = Run.objects.filter(thread_id=thread.pk).order_by("-created_at").values_list("pk", flat=True).first()
    return latest == run.pk


def _fresh(run: Run, thread: ThreadMeta) -> tuple[Run, ThreadMeta, bool]:
    run.refresh_from_db()
    thread.refresh_from_db(fields=["status"])
    return run, thread, _awaiting_input(run, thread)


# -- tasks as A2A objects ------------------------------------------------------------------------


def _status(run: Run, state: str, context_id: str, task: str) -> dict[str, Any]:
    moment = run.finished_at or run.started_at or run.created_at
    status: dict[str, Any] = {"state": state, "timestamp": moment.isoformat()}
    text = {
        wire.COMPLETED: run.last_ai_message,
        wire.FAILED: run.error or "the run failed",
        wire.CANCELED: "Task was canceled",
        wire.INPUT_REQUIRED: run.last_ai_message or "The agent is waiting for your answer.",
    }.get(state)
    if text:
        status["message"] = wire.text_message(
            "ROLE_AGENT", text, message_id=f"{run.run_id}:status", context_id=context_id, task=task
        )
    return status


async def _history(run: Run, *, scope: str, length: int) -> list[dict[str, Any]]:
    """The last ``length`` messages: of the context (the thread's state) or of this task alone."""
    if length == 0:
        return []
    context_id, task = run.thread_id, wire.task_id(run.thread_id, run.run_id)
    if scope == "task":
        pairs = [("ROLE_USER", run.first_human_message, "in"), ("ROLE_AGENT", run.last_ai_message, "out")]
        found = [(role, text, f"{run.run_id}:{n}") for role, text, n in pairs if text]
    else:
        accessor = await astate_accessor(run.assistant_id)
        snapshot = await accessor.aget(run.thread_id)
        found = []
        for index, message in enumerate((snapshot.values or {}).get("messages") or []):
            role = {"human": "ROLE_USER", "ai": "ROLE_AGENT"}.get(getattr(message, "type", ""))
            if role and (text := str(message.text)):
                found.append((role, text, message.id or f"{run.thread_id}:{index}"))
    return [
        wire.text_message(role, text, message_id=mid, context_id=context_id, task=task)
        for role, text, mid in found[-length:]
    ]


async def atask_object(
    run: Run, thread: ThreadMeta, *, history: int, scope: str = "context", artifacts: bool = True
) -> dict[str, Any]:
    """Return the task as A2A's ``Task`` (v1.0 shape), read fresh from its run."""
    run, thread, awaiting = await database_sync_to_async(_fresh)(run, thread)
    task = wire.task_id(thread.thread_id, run.run_id)
    state = wire.task_state(run.status, awaiting_input=awaiting)
    body: dict[str, Any] = {"id": task, "contextId": thread.thread_id, "status": _status(run, state, thread.pk, task)}
    if artifacts and state == wire.COMPLETED and run.last_ai_message:
        body["artifacts"] = [wire.artifact(run.run_id, run.last_ai_message)]
    if messages := await _history(run, scope=scope, length=history):
        body["history"] = messages
    return body


# -- methods -----------------------------------------------------------------------------------


def _replied_before(run: Run, seq: int) -> bool:
    """Whether the run logged message events up to ``seq``: a stream resumed after them appends to its artifact."""
    log = ThreadStreamEvent.objects.filter(thread_id=run.thread_id, run_id=run.run_id, method="messages")
    return log.filter(seq__lte=seq).exists()


def _log_end(thread_id: str) -> int:
    return ThreadStreamEvent.objects.filter(thread_id=thread_id).aggregate(hi=Max("seq"))["hi"] or 0


alog_end = database_sync_to_async(_log_end)


async def atask_send(owner, agent: Agent, params: dict[str, Any]) -> tuple[Run, ThreadMeta, int]:
    """Start the run a message asks for: on its ``contextId`` (a new thread when none), resuming an interrupt.

    Returns the run, its thread and the thread log's end before the run: its stream replays after it.
    """
    message = params.get("message")
    text = wire.message_text(message)
    assert isinstance(message, dict)  # message_text refuses anything else
    context_id = message.get("contextId")
    if context_id is not None and (not isinstance(context_id, str) or not context_id):
        raise A2AError(wire.INVALID_PARAMS, "message.contextId must be a non-empty string")
    if message.get("taskId"):
        run, thread = await atask_get(owner, agent, message["taskId"])
        run, thread, awaiting = await database_sync_to_async(_fresh)(run, thread)
        if wire.task_state(run.status, awaiting_input=awaiting) in wire.TERMINAL_STATES:
            raise A2AError(wire.UNSUPPORTED_OPERATION, "A terminal task cannot accept another message")
        if context_id is not None and context_id != thread.thread_id:
            raise A2AError(wire.INVALID_PARAMS, "message.contextId is not the task's context")
        context_id = thread.thread_id
    thread_id = context_id or str(uuid.uuid4())
    resume = await database_sync_to_async(_interrupted)(owner=owner, thread_id=thread_id)
    request = RunRequest(
        assistant_id=agent.assistant_id,
        input=None if resume else {"messages": [{"role": "user", "content": text}]},
        command={"resume": text} if resume else None,
        metadata={"a2a": {"message_id": str(message.get("messageId") or "")}},
        multitask_strategy="enqueue",
        if_not_exists="create",
        stream_mode=("values", "messages-tuple"),
    )
    since = await alog_end(thread_id)
    try:
        started = await arun_start(owner=owner, thread_id=thread_id, request=request)
    except NotFound as exc:  # another user's context: as for a task that does not exist
        raise A2AError(wire.TASK_NOT_FOUND, "Task not found") from exc
    return started.run, started.thread, since


async def atask_wait(run: Run) -> None:
    """Wait for the task's run to end (``SendMessage`` without ``returnImmediately``)."""
    await arun_final_values(run)


def _interrupted(*, owner, thread_id: str) -> bool:
    thread = owned_thread_or_none(thread_id=thread_id, owner=owner)
    return thread is not None and thread.status == ThreadStatus.INTERRUPTED


async def atask_cancel(owner, agent: Agent, task: Any) -> tuple[Run, ThreadMeta]:
    """Cancel (``interrupt``) the caller's unfinished task and wait a moment for it to stop."""
    run, thread = await atask_get(owner, agent, task, action="update")
    run, thread, awaiting = await database_sync_to_async(_fresh)(run, thread)
    if run.status not in UNFINISHED_STATUSES:
        raise A2AError(wire.TASK_NOT_CANCELABLE, "Task cannot be canceled: it has already ended")
    run = await arun_cancel(run=run, action="interrupt", by=owner)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CANCEL_WAIT_SECONDS
    while run.status in UNFINISHED_STATUSES and loop.time() < deadline:
        await asyncio.sleep(0.1)
        await database_sync_to_async(run.refresh_from_db)(fields=["status"])
    return run, thread


def _task_page(*, scope: AccessScope, agent: Agent, context_id, state, offset: int, size: int):
    runs = Run.objects.filter(scope.q(prefix="thread__"), kwargs__assistant_id=agent.assistant_id)
    if context_id:
        runs = runs.filter(thread_id=context_id)
    if state is not None:
        statuses = [s for s, mapped in wire.RUN_STATES.items() if mapped == state]
        runs = runs.filter(status__in=statuses or ["-"])
    total = runs.count()
    page = list(runs.select_related("thread").order_by("-created_at", "-run_id")[offset : offset + size])
    return page, total


async def atask_list(owner, agent: Agent, params: dict[str, Any]) -> dict[str, Any]:
    """One page of the caller's tasks on this agent, newest first (``contextId``, ``status`` filters)."""
    size, offset = wire.page_size(params.get("pageSize")), wire.page_offset(params.get("pageToken"))
    history = wire.history_length(params.get("historyLength"), default=0)
    scope_name = wire.history_scope(params.get("historyScope"))
    state = wire.state_filter(params.get("status"))
    scope = await aauthorize(owner, resource="threads", action="search", value={})
    page, total = await database_sync_to_async(_task_page)(
        scope=scope, agent=agent, context_id=params.get("contextId"), state=state, offset=offset, size=size
    )
    tasks = [
        await atask_object(
            run, run.thread, history=history, scope=scope_name, artifacts=bool(params.get("includeArtifacts"))
        )
        for run in page
    ]
    following = offset + len(page)
    return {
        "tasks": tasks,
        "nextPageToken": str(following) if following < total else "",
        "pageSize": len(tasks),
        "totalSize": total,
    }


# -- streams -----------------------------------------------------------------------------------


def _run_log_start(run: Run) -> int:
    """The seq a stream of the whole task replays after: before its first event (the log's end if none yet).

    The log's end is read first: an event the run logs in between is numbered after it.
    """
    log = ThreadStreamEvent.objects.filter(thread_id=run.thread_id)
    high = log.aggregate(hi=Max("seq"))["hi"] or 0
    first = log.filter(run_id=run.run_id).aggregate(lo=Min("seq"))["lo"]
    return high if first is None else first - 1


class TaskStream:
    """Turns one run's protocol-v2 log events into A2A stream results (v1.0 shape)."""

    def __init__(self, run: Run, *, streamed: bool = False) -> None:
        self.run = run
        self.context_id = run.thread_id
        self.task = wire.task_id(run.thread_id, run.run_id)
        self.prefixes = (f"{run.run_id}:", f"synth:{run.run_id}:")
        # A resumed stream may start inside a message: its text deltas are the agent's unless a start said otherwise.
        self.ai_message = True
        # Whether the artifact has had text before: a chunk then appends (``append``) instead of starting it.
        self.streamed = streamed
        self.ended = False

    def results(self, event: dict) -> list[dict[str, Any]]:
        if not event["event_id"].startswith(self.prefixes):
            return []
        params = event["params"]
        data = params.get("data") or {}
        if params.get("namespace"):
            return []
        method = event["method"]
        if method == "lifecycle":
            if data.get("event") == "running":
                return [self._status(wire.WORKING)]
            if data.get("event") in ("completed", "failed", "interrupted"):
                self.ended = True
            return []
        if method == "messages" and isinstance(data, dict):
            return self._message(data)
        return []

    def _message(self, data: dict) -> list[dict[str, Any]]:
        if data.get("event") == "message-start":
            self.ai_message = data.get("role") in ("ai", "assistant")
        delta = data.get("delta") or {}
        if not (self.ai_message and data.get("event") == "content-block-delta" and delta.get("type") == "text-delta"):
            return []
        update = {
            "taskId": self.task,
            "contextId": self.context_id,
            "artifact": wire.artifact(self.run.run_id, delta.get("text", "")),
            "append": self.streamed,
            "lastChunk": False,
        }
        self.streamed = True
        return [{"artifactUpdate": update}]

    def _status(self, state: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
        status = status or {"state": state}
        return {"statusUpdate": {"taskId": self.task, "contextId": self.context_id, "status": status}}

    async def final(self, thread: ThreadMeta) -> dict[str, Any]:
        task = await atask_object(self.run, thread, history=0, artifacts=False)
        return self._status(task["status"]["state"], task["status"])


async def atask_events(run: Run, thread: ThreadMeta, *, since: int | None) -> AsyncIterator[tuple[int | None, Any]]:
    """Yield ``(seq, result)`` for the task's events after ``since`` (its first when None), then its final status.

    ``(None, None)`` is an idle tick (a heartbeat). Followed from the thread's
    log, so it works for a run executing in any process, and for one long
    ended; a run that ended without a terminal event in the log (cancelled
    before it started, its events pruned) ends from its row at the next tick.
    """
    if since is None:
        since = await database_sync_to_async(_run_log_start)(run)
        stream = TaskStream(run)
    else:
        stream = TaskStream(run, streamed=await database_sync_to_async(_replied_before)(run, since))
    incarnation = Incarnation.of(thread)
    async for event in follow_thread(get_bridge(), incarnation, since=since, idle_timeout=IDLE_SECONDS):
        if event is None:
            await database_sync_to_async(run.refresh_from_db)(fields=["status"])
            if run.status not in UNFINISHED_STATUSES:
                yield None, await stream.final(thread)
                return
            yield None, None
            continue
        for item in stream.results(event):
            yield event["seq"], item
        if stream.ended:
            yield event["seq"], await stream.final(thread)
            return
    yield None, await stream.final(thread)  # the thread was deleted meanwhile


def domain_error(exc: DomainError) -> A2AError:
    """Translate a run service's refusal into A2A's JSON-RPC error."""
    if isinstance(exc, NotFound):
        return A2AError(wire.TASK_NOT_FOUND, str(exc))
    if isinstance(exc, Invalid):
        return A2AError(wire.INVALID_PARAMS, str(exc))
    return A2AError(wire.INTERNAL_ERROR, str(exc))
