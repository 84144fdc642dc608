"""Protocol-v2 commands (``POST /threads/{id}/commands`` and in-band on the WebSocket).

One command in, one envelope out. Commands are one more interface over the
run services: ``run.start`` and ``input.respond`` call ``arun_start``, the
state commands the state accessor. Protocol errors are envelopes (HTTP 200)
with the reference's codes; another user's thread is ``no_such_thread``,
exactly as a missing one. Mode-gate errors stay domain errors: the HTTP
route answers them as every route does (409/503).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from rest_framework.exceptions import ValidationError

from checkpoints.accessor import astate_accessor
from checkpoints.errors import CheckpointNotFoundError, UnknownGraphError
from checkpoints.serialization import serialize, thread_state
from core.errors import DomainError, Forbidden, Invalid, NotFound, ThreadNotFound, Unavailable
from core.validation import thread_id_problem
from runs.models import Run, RunStatus
from runs.services.interrupts import InterruptAnswered, interrupt_answered
from runs.services.run_request import (
    MULTITASK_STRATEGIES,
    RunRequest,
    headers_matching,
    run_command_check,
    run_config_clean,
    run_input_check,
    run_metadata_clean,
)
from runs.services.start import arun_start
from runs.streaming.protocol import EventFilter, parse_filter
from threads.models import ThreadMeta, ThreadStreamEvent
from threads.selectors import owned_thread_or_none
from threads.services import thread_state_update
from threads.stream_log import thread_stream_bounds

ENVELOPE_MESSAGE = "Protocol commands must include an integer id and string method."


class ProtocolError(Exception):
    """A command failed; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


class Subscriptions:
    """A WebSocket's subscriptions; HTTP commands have none (subscribe there does nothing)."""

    def __init__(self, on_change: Callable[[str, EventFilter, int | None], Awaitable[int]]) -> None:
        self.filters: dict[str, EventFilter] = {}
        self._on_change = on_change

    async def subscribe(self, event_filter: EventFilter, since: int | None) -> tuple[str, int]:
        subscription_id = str(uuid.uuid4())
        self.filters[subscription_id] = event_filter
        return subscription_id, await self._on_change(subscription_id, event_filter, since)

    async def unsubscribe(self, subscription_id: str) -> None:
        if self.filters.pop(subscription_id, None) is None:
            raise ProtocolError("no_such_subscription", f"Unknown subscription: {subscription_id}")


def error_envelope(command_id: Any, code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "id": command_id, "error": code, "message": message, **extra}


def valid_envelope(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("id"), int)
        and not isinstance(message.get("id"), bool)
        and isinstance(message.get("method"), str)
    )


def _owned(user, thread_id: str) -> ThreadMeta | None:
    return owned_thread_or_none(thread_id=thread_id, owner=user)


aowned_or_none = database_sync_to_async(_owned)


async def applied_through_seq(thread: ThreadMeta | None) -> int:
    """The thread's highest seq; 0 for a thread that is not the caller's, exactly as for a missing one."""
    if thread is None:
        return 0
    _low, high = await database_sync_to_async(thread_stream_bounds)(thread_id=thread.thread_id)
    return high


async def adispatch(
    *,
    user,
    thread_id: str,
    message: Any,
    subscriptions: Subscriptions | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict:
    """Apply one command envelope and return the response envelope.

    The caller's thread is looked up once, with the owner in the query:
    another user's thread and a missing id cost the same and answer the
    same (``no_such_thread``, ``applied_through_seq`` 0); no handler reads
    a thread it was not given. ``headers``: the request's (the WebSocket's
    handshake's), whose ``http.configurable_headers`` a started run gets.
    """
    _copied_headers.set(headers_matching(headers or {}, settings.DEERFLOW.get("CONFIGURABLE_HEADERS")))
    if not valid_envelope(message):
        command_id = message.get("id") if isinstance(message, dict) else None
        return error_envelope(command_id, "invalid_argument", ENVELOPE_MESSAGE)
    command_id, method = message["id"], message["method"]
    params = message.get("params")
    try:
        handler = HANDLERS.get(method)
        if handler is None:
            raise ProtocolError("unknown_command", f"Unknown command: {method}")
        if not isinstance(params, dict | None):
            raise ProtocolError("invalid_argument", "params must be an object.")
        if problem := thread_id_problem(thread_id):  # the WebSocket's path is not validated by a view
            raise ProtocolError("invalid_argument", problem)
        thread = await aowned_or_none(user, thread_id)
        # The seq the command was applied after: read first, so the events of a run it starts
        # (which the SDKs replay from ``since = max(seen, applied_through_seq)``) are never behind it.
        applied_through = await applied_through_seq(thread)
        result = await handler(
            user=user, thread_id=thread_id, thread=thread, params=params or {}, subscriptions=subscriptions
        )
    except ProtocolError as exc:
        return error_envelope(command_id, exc.code, exc.message, **exc.extra)
    except ValidationError as exc:
        return error_envelope(command_id, "invalid_argument", _validation_message(exc.detail))
    except DomainError as exc:
        return error_envelope(command_id, *_envelope_error(exc, thread_id=thread_id))
    return {"type": "success", "id": command_id, "result": result, "meta": {"applied_through_seq": applied_through}}


def _envelope_error(exc: DomainError, *, thread_id: str) -> tuple[str, str]:
    """The protocol's error code and message for a domain error, by its kind."""
    detail = exc.detail(thread_id=thread_id)
    if isinstance(exc, InterruptAnswered):
        return "no_such_interrupt", detail
    if isinstance(exc, UnknownGraphError):
        return "unknown_error", f"422: Invalid assistant: {detail}"
    if isinstance(exc, ThreadNotFound):
        return "no_such_thread", detail
    if isinstance(exc, Invalid | NotFound):  # a checkpoint, an assistant or a field the command named
        return "invalid_argument", detail
    if isinstance(exc, Unavailable | Forbidden):
        return "unknown_error", f"{exc.status}: {detail}"
    return "unknown_error", f"409: {detail}"


def _required(thread: ThreadMeta | None, thread_id: str) -> ThreadMeta:
    """The caller's thread, or ``no_such_thread`` (another user's included)."""
    if thread is None:
        raise ProtocolError("no_such_thread", f"Thread {thread_id} not found")
    return thread


def _optional_text(params: dict[str, Any], key: str, *, where: str = "") -> str | None:
    """``params[key]`` when it is a non-empty string, None when absent or null, else ``invalid_argument``."""
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ProtocolError("invalid_argument", f"{where}{key} must be a non-empty string, got {value!r}.")
    return value


def _object(params: dict[str, Any], key: str, *, where: str = "") -> dict[str, Any] | None:
    """``params[key]`` when it is an object, None when absent or null, else ``invalid_argument``."""
    value = params.get(key)
    if value is not None and not isinstance(value, dict):
        raise ProtocolError("invalid_argument", f"{where}{key} must be an object, got {type(value).__name__}.")
    return value


def _validation_message(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_validation_message(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_validation_message(d) for d in detail)
    return str(detail)


# -- runs ---------------------------------------------------------------------


async def _pending_interrupts(thread: ThreadMeta | None) -> list[Any]:
    if thread is None:
        return []
    snapshot = await (await astate_accessor(thread.assistant_id)).aget(thread.thread_id)
    return list(snapshot.interrupts)


# The headers of the command being applied that a run it starts copies into ``configurable``
# (langgraph.json ``http.configurable_headers``), set by ``adispatch`` for its task.
_copied_headers: ContextVar[Mapping[str, str] | None] = ContextVar("protocol_copied_headers", default=None)


def _run_request(params: dict[str, Any], *, assistant_id: str, checkpoint_id: str | None = None) -> RunRequest:
    """The run part of a command, by the rules every run request meets; ``invalid_argument`` names a refusal.

    The thread is created when missing (``if_not_exists: create``), as useStream expects.
    """
    strategy = params.get("multitaskStrategy") or params.get("multitask_strategy") or "enqueue"
    if strategy not in MULTITASK_STRATEGIES:
        choices = ", ".join(MULTITASK_STRATEGIES)
        raise ProtocolError("invalid_argument", f"multitaskStrategy must be one of {choices}, got {strategy!r}.")
    return RunRequest(
        assistant_id=assistant_id,
        config=run_config_clean(_object(params, "config")),
        metadata=run_metadata_clean(_object(params, "metadata")),
        context=_object(params, "context"),
        multitask_strategy=strategy,
        if_not_exists="create",
        checkpoint_id=checkpoint_id,
    ).with_headers(_copied_headers.get() or {})


def _fork_point(params: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Return (params without it, the ``config.configurable.checkpoint_id`` useStream folds ``forkFrom`` into)."""
    config = _object(params, "config")
    configurable = _object(config or {}, "configurable", where="config.")
    if not configurable or configurable.get("checkpoint_id") is None:
        return params, None
    checkpoint_id = configurable["checkpoint_id"]
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise ProtocolError("invalid_argument", f"Invalid config.configurable.checkpoint_id: {checkpoint_id!r}.")
    rest = {k: v for k, v in configurable.items() if k != "checkpoint_id"}
    return {**params, "config": {**(config or {}), "configurable": rest}}, checkpoint_id


async def run_start(*, user, thread_id: str, thread: ThreadMeta | None, params: dict[str, Any], subscriptions) -> dict:
    """Start a run, or resume the thread's pending interrupts with ``input``; create the thread lazily.

    Another user's thread is refused by ``arun_start`` (``no_such_thread``):
    the id is taken, so it cannot be created either.
    """
    assistant_id = _optional_text(params, "assistant_id")
    if assistant_id is None:
        raise ProtocolError("invalid_argument", "run.start requires an assistant_id.")
    params, checkpoint_id = _fork_point(params)
    # A malformed request is refused before the thread's state is read.
    request = _run_request(params, assistant_id=assistant_id, checkpoint_id=checkpoint_id)
    payload = params.get("input")
    pending = [i.id for i in await _pending_interrupts(thread)] if payload is not None else []
    if pending:
        request = request.replace(command={"resume": payload})
    else:
        request = request.replace(input=run_input_check(payload))
    started = await arun_start(owner=user, thread_id=thread_id, request=request, answers=pending)
    return {"run_id": started.run.run_id}


def _answers(params: dict[str, Any]) -> dict[str, Any]:
    """Return ``{interrupt_id: response}`` from the single or the batch form; ``invalid_argument`` if malformed."""
    responses = params.get("responses")
    if responses is None:
        responses = [params]
    if not isinstance(responses, list) or not responses or not all(isinstance(r, dict) for r in responses):
        raise ProtocolError("invalid_argument", "input.respond requires an interrupt_id.")
    answers: dict[str, Any] = {}
    for response in responses:
        interrupt_id = response.get("interrupt_id")
        if not isinstance(interrupt_id, str) or not interrupt_id:
            raise ProtocolError("invalid_argument", "input.respond requires an interrupt_id.")
        namespace = response.get("namespace")
        if namespace is not None and not (isinstance(namespace, list) and all(isinstance(s, str) for s in namespace)):
            raise ProtocolError("invalid_argument", "namespace must be an array of strings.")
        if interrupt_id in answers:
            raise ProtocolError("invalid_argument", f"Interrupt {interrupt_id} is answered twice in one input.respond.")
        if namespace:  # interrupts are answered at the root; a subgraph's is named by its id there
            raise ProtocolError("no_such_interrupt", f"Unknown or already-consumed interrupt: {interrupt_id}")
        answers[interrupt_id] = response.get("response")
    return answers


async def input_respond(
    *, user, thread_id: str, thread: ThreadMeta | None, params: dict[str, Any], subscriptions
) -> dict:
    """Answer pending interrupts (one, or the batch form) with a new run resuming them.

    Two answers to one interrupt both find it pending; admission lets one
    run (``arun_start``'s ``answers``) and the other is ``no_such_interrupt``.
    """
    answers = _answers(params)
    thread = _required(thread, thread_id)
    pending = {interrupt.id for interrupt in await _pending_interrupts(thread)}
    if unknown := [i for i in answers if i not in pending]:
        consumed = await database_sync_to_async(interrupt_answered)(thread_id=thread_id, interrupt_ids=unknown)
        if not pending and not consumed:
            raise ProtocolError("no_such_run", "No run is waiting for input on this thread.")
        raise ProtocolError("no_such_interrupt", f"Unknown or already-consumed interrupt: {unknown[0]}")
    command: dict[str, Any] = {"resume": answers}
    for key in ("update", "goto"):
        if params.get(key) is not None:
            command[key] = params[key]
    assistant_id = _optional_text(params, "assistant_id") or thread.assistant_id
    request = _run_request(params, assistant_id=assistant_id).replace(command=run_command_check(command))
    await arun_start(owner=user, thread_id=thread_id, request=request, answers=list(answers))
    return {}


# -- subscriptions ----------------------------------------------------------------


def _filter(params: dict[str, Any]) -> EventFilter:
    try:
        return parse_filter(params)
    except ValueError as exc:
        raise ProtocolError("invalid_argument", str(exc)) from None


async def subscription_subscribe(*, params: dict[str, Any], subscriptions, **_: Any) -> dict:
    """Subscribe this socket; answered alike whoever's the thread is (the pump sends only the caller's)."""
    event_filter = _filter(params)
    if subscriptions is None:  # over HTTP there is no connection to deliver to
        return {"subscription_id": str(uuid.uuid4()), "replayed_events": 0}
    since = params.get("since")
    since = since if isinstance(since, int) and not isinstance(since, bool) and since >= 0 else None
    subscription_id, replayed = await subscriptions.subscribe(event_filter, since)
    return {"subscription_id": subscription_id, "replayed_events": replayed}


async def subscription_reconnect(*, params: dict[str, Any], subscriptions, **rest: Any) -> dict:
    _filter(params)  # a malformed filter is said before the missing connection
    if subscriptions is None:
        raise ProtocolError("no_such_run", "No stream is bound to this connection.")
    if (old := params.get("subscription_id")) in subscriptions.filters:
        await subscriptions.unsubscribe(old)
    return await subscription_subscribe(params=params, subscriptions=subscriptions, **rest)


async def subscription_unsubscribe(*, params: dict[str, Any], subscriptions, **_: Any) -> dict:
    subscription_id = _optional_text(params, "subscription_id")
    if subscriptions is not None:
        await subscriptions.unsubscribe(str(subscription_id))
    return {}


# -- agent and state ----------------------------------------------------------------


def _tree(thread: ThreadMeta, run_id: str | None) -> dict[str, Any] | None:
    runs = Run.objects.filter(thread_id=thread.thread_id)
    run = runs.filter(pk=run_id).first() if run_id else runs.order_by("-created_at").first()
    if run is None:
        return None
    terminal = (
        ThreadStreamEvent.objects.filter(thread_id=thread.thread_id, run_id=run.run_id, method="lifecycle")
        .values_list("namespace", "data")
        .order_by("seq")
    )
    statuses: dict[tuple[str, ...], str] = {}
    for namespace, data in terminal:
        statuses[tuple(namespace)] = (data or {}).get("event", "running")
    root = statuses.pop((), None) or ("running" if run.status == RunStatus.RUNNING else "completed")
    node: dict[str, Any] = {"namespace": [], "status": root, "graph_name": run.assistant_id}
    children = [
        {"namespace": list(ns), "status": status, "graph_name": ns[-1].split(":", 1)[0]}
        for ns, status in statuses.items()
        if len(ns) == 1
    ]
    if children:
        node["children"] = children
    return {"tree": node}


async def agent_get_tree(*, thread_id: str, thread: ThreadMeta | None, params: dict[str, Any], **_: Any) -> dict:
    run_id = _optional_text(params, "run_id")
    tree = await database_sync_to_async(_tree)(_required(thread, thread_id), run_id)
    if tree is None:
        raise ProtocolError("no_such_run", "No run is bound to this thread.")
    return tree


async def state_get(*, thread_id: str, thread: ThreadMeta | None, params: dict[str, Any], **_: Any) -> dict:
    """The thread state (as ``GET /threads/{id}/state``), at the head or ``checkpoint_id``."""
    checkpoint_id = _optional_text(params, "checkpoint_id")
    thread = _required(thread, thread_id)
    accessor = await astate_accessor(thread.assistant_id)
    try:
        snapshot = await accessor.aget(thread.thread_id, checkpoint_id=checkpoint_id)
    except CheckpointNotFoundError as exc:
        raise ProtocolError("invalid_argument", str(exc)) from None
    return serialize(thread_state(snapshot))


async def state_list_checkpoints(
    *, thread_id: str, thread: ThreadMeta | None, params: dict[str, Any], **_: Any
) -> dict:
    """Checkpoints newest first as ``{id, parent_id, step, source}``; ``limit`` (1–1000, default 20)."""
    limit = params.get("limit", 20)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise ProtocolError("invalid_argument", "limit must be an integer from 1 to 1000.")
    thread = _required(thread, thread_id)
    accessor = await astate_accessor(thread.assistant_id)
    snapshots = await accessor.ahistory(thread.thread_id, limit=limit)
    return {
        "checkpoints": [
            {
                "id": s.config["configurable"]["checkpoint_id"],
                "parent_id": (s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                "step": (s.metadata or {}).get("step"),
                "source": (s.metadata or {}).get("source"),
            }
            for s in snapshots
        ]
    }


async def state_fork(*, thread_id: str, thread: ThreadMeta | None, params: dict[str, Any], **_: Any) -> dict:
    """Copy the state at ``checkpoint_id`` into a new head (LangGraph's ``__copy__``); return its id."""

    checkpoint_id = _optional_text(params, "checkpoint_id")
    if checkpoint_id is None:
        raise ProtocolError("invalid_argument", "state.fork requires a checkpoint_id.")
    thread = _required(thread, thread_id)
    try:
        config = await database_sync_to_async(thread_state_update)(
            thread=thread, values=None, as_node="__copy__", checkpoint_id=checkpoint_id
        )
    except CheckpointNotFoundError as exc:
        raise ProtocolError("invalid_argument", str(exc)) from None
    return {"checkpoint_id": config["configurable"]["checkpoint_id"]}


HANDLERS = {
    "run.start": run_start,
    "input.respond": input_respond,
    "subscription.subscribe": subscription_subscribe,
    "subscription.unsubscribe": subscription_unsubscribe,
    "subscription.reconnect": subscription_reconnect,
    "agent.getTree": agent_get_tree,
    "state.get": state_get,
    "state.listCheckpoints": state_list_checkpoints,
    "state.fork": state_fork,
}
